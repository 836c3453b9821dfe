// Tests that an upstream that stops answering gets the client a 504, or its pair closed, after http.response_timeout, through every HTTP kind.

package all_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/forwarder"
	"github.com/splicer/splicer/forwarder/fwdtest"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/testenv"
)

// withResponseTimeout sets every listener's http.response_timeout to d.
func withResponseTimeout(listeners []config.Listener, d time.Duration) []config.Listener {
	for i := range listeners {
		listeners[i].HTTP = &config.HTTP{ResponseTimeout: config.Duration(d)}
	}
	return listeners
}

// TestSilentUpstreamGets504: an upstream that reads a request and never
// answers (a hung application server) gets the client a 504 once
// http.response_timeout passes, from every HTTP kind, with or without a
// request body; the pair's close reason is upstream_timeout. Without the
// timeout the client waited for idle_timeout, an hour by default.
func TestSilentUpstreamGets504(t *testing.T) {
	up := fwdtest.RawBackend(t, func(c net.Conn) { io.Copy(io.Discard, c) })
	const timeout = time.Second
	listeners := withResponseTimeout(fwdtest.HTTPListeners(t, up), timeout)
	f := fwdtest.Start(t, listeners...)
	requests := map[string]string{
		"GET":  "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n",
		"POST": "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Length: 5\r\n\r\nhello",
	}
	t.Run("kinds", func(t *testing.T) {
		for _, l := range listeners {
			for name, raw := range requests {
				t.Run(l.Name+"/"+name, func(t *testing.T) {
					t.Parallel()
					start := time.Now()
					resp := fwdtest.Exchange(t, f.Addr(l.Name).String(), fmt.Sprintf(raw, fwdtest.RequestTarget(l, up, "/"), up))
					took := time.Since(start)
					if resp.StatusCode != http.StatusGatewayTimeout {
						t.Fatalf("%s through %s: %s after %v, want 504", name, l.Proxy, resp.Status, took)
					}
					if took < timeout {
						t.Errorf("504 after %v: before the response timeout of %v", took, timeout)
					}
				})
			}
		}
	})
	for _, l := range listeners {
		fwdtest.WaitMetric(t, f, float64(len(requests)), "splicer_connections_closed_total", "listener", l.Name, "reason", "upstream_timeout")
	}
}

// TestResponseTimeoutStartsAfterTheBody: the response's wait begins once
// the request is sent. A body that takes three response timeouts to
// arrive, its bytes never further apart than half of one, is answered
// 200 by a back end that reads it all first, through every HTTP kind
// (the filter reads the response while the body still goes up).
func TestResponseTimeoutStartsAfterTheBody(t *testing.T) {
	up := fwdtest.BodyReadingOrigin(t)
	const timeout = 400 * time.Millisecond
	listeners := withResponseTimeout(fwdtest.HTTPListeners(t, up), timeout)
	f := fwdtest.Start(t, listeners...)
	for _, l := range listeners {
		t.Run(l.Name, func(t *testing.T) {
			t.Parallel()
			c := fwdtest.DialFor(t, f.Addr(l.Name).String(), 10*time.Second)
			defer c.Close()
			head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Length: 6\r\n\r\n", fwdtest.RequestTarget(l, up, "/"), up)
			if _, err := c.Write([]byte(head)); err != nil {
				t.Fatal(err)
			}
			for range 6 {
				time.Sleep(timeout / 2)
				if _, err := c.Write([]byte("x")); err != nil {
					t.Fatal(err)
				}
			}
			if err := fwdtest.AnsweredLength(bufio.NewReader(c), 6); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestStalledResponseBodyEndsThePair: an upstream that sends a response
// head and part of its body, then nothing, holds the pair for
// http.response_timeout, not idle_timeout: the client's read of the body
// ends short. A body the proxy copies (20 KB; the filter's, always) is
// counted upstream_timeout; one past the copy bounds of http-forward and
// http-reverse (1 MiB) goes to the engine, which ends it as idle.
func TestStalledResponseBodyEndsThePair(t *testing.T) {
	const timeout = time.Second
	for _, size := range []int{20_000, 1 << 20} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			head := fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", size)
			up := fwdtest.RawBackend(t, func(c net.Conn) {
				r := bufio.NewReader(c)
				if _, err := http.ReadRequest(r); err != nil {
					return
				}
				c.Write([]byte(head + strings.Repeat("x", 100)))
				io.Copy(io.Discard, r) // and nothing more
			})
			listeners := withResponseTimeout(fwdtest.HTTPListeners(t, up), timeout)
			f := fwdtest.Start(t, listeners...)
			t.Run("kinds", func(t *testing.T) {
				for _, l := range listeners {
					t.Run(l.Name, func(t *testing.T) {
						t.Parallel()
						start := time.Now()
						got, err := stalledBody(t, f.Addr(l.Name).String(), fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", fwdtest.RequestTarget(l, up, "/"), up))
						took := time.Since(start)
						if err == nil || got >= int64(size) {
							t.Fatalf("read %d of %d body bytes, err %v: want the body cut short", got, size, err)
						}
						if took < timeout {
							t.Errorf("body cut after %v: before the response timeout of %v", took, timeout)
						}
					})
				}
			})
			for _, l := range listeners {
				reason := "upstream_timeout"
				if size > 1<<19 && l.Proxy != "filter" { // the filter never splices
					reason = "idle"
				}
				fwdtest.WaitMetric(t, f, 1, "splicer_connections_closed_total", "listener", l.Name, "reason", reason)
			}
		})
	}
}

// stalledBody sends raw on a new connection to addr, reads the response
// head and then its body until it ends, and returns how many body bytes
// came and how the body ended. The connection gives up after 5 s.
func stalledBody(tb testing.TB, addr, raw string) (int64, error) {
	tb.Helper()
	c := fwdtest.DialFor(tb, addr, 5*time.Second)
	defer c.Close()
	if _, err := c.Write([]byte(raw)); err != nil {
		tb.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		tb.Fatalf("response head: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("response %s, want 200 and a body cut short", resp.Status)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		tb.Fatalf("body still open after 5 s with %d bytes read: the response timeout did not end it", n)
	}
	return n, err
}

// TestClientThatStopsReadingEndsItsPair: a client that asks for
// responses and takes nothing of them holds its pair, and the upstream
// connection, for http.response_timeout, as a server that stops sending
// would, not for idle_timeout. It pipelines 40 requests for 400 KB, more
// than the sockets' buffers hold on loopback; each body is copied by
// http-reverse and the filter (close reason client_timeout) and spliced
// by http-forward's engine, which cannot tell who stalled (idle). Where
// the socket towards the client grew to take a whole spliced body (the
// kernel sizes it, and on a loaded machine it did), http-forward waits
// on a head instead, and says client_timeout.
func TestClientThatStopsReadingEndsItsPair(t *testing.T) {
	const timeout = time.Second
	body := strings.Repeat("x", 400_000)
	resp := []byte(fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body))
	up := fwdtest.RawBackend(t, func(c net.Conn) { fwdtest.AnswerEveryHead(c, resp) })
	listeners := withResponseTimeout(fwdtest.HTTPListeners(t, up), timeout)
	f := fwdtest.Start(t, listeners...)
	reasons := map[string][]string{
		"http-forward": {"idle", "client_timeout"},
		"http-reverse": {"client_timeout"},
		"filter":       {"client_timeout"},
	}
	for _, l := range listeners {
		c := dialNotReading(t, f.Addr(l.Name).String()) // open until the test ends
		req := fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", fwdtest.RequestTarget(l, up, "/"), up)
		if _, err := c.Write([]byte(strings.Repeat(req, 40))); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(timeout * 3 / 4)
	for _, l := range listeners {
		if n := closedFor(f, l.Name, reasons[l.Proxy]...); n != 0 {
			t.Errorf("%s: pair closed (%v) before the response timeout", l.Name, reasons[l.Proxy])
		}
	}
	for _, l := range listeners {
		testenv.Eventually(t, fmt.Sprintf("%s's pair to close (%v)", l.Name, reasons[l.Proxy]),
			func() bool { return closedFor(f, l.Name, reasons[l.Proxy]...) == 1 })
	}
}

// closedFor is how many of listener's pairs closed for any of reasons.
func closedFor(f *forwarder.Forwarder, listener string, reasons ...string) float64 {
	var n float64
	for _, r := range reasons {
		n += fwdtest.Metric(f, "splicer_connections_closed_total", "listener", listener, "reason", r)
	}
	return n
}

// dialNotReading connects to addr with a 4 KiB receive buffer, so that a
// client that reads nothing soon has the proxy wait for it.
func dialNotReading(tb testing.TB, addr string) net.Conn {
	tb.Helper()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<10) })
		return errors.Join(err, serr)
	}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}
