// The HTTP kinds' timeouts, through every kind: a stalled or trickled request body gets 408 (body_timeout, body_min_rate), a silent upstream 504 (response_timeout), an idle keep-alive connection or a silent client is closed (keepalive_timeout, request_timeout), a body that stalls mid-stream is cut (idle_timeout).

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

// Tests that an upstream that stops answering gets the client a 504, or its pair closed, after http.response_timeout, through every HTTP kind.

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
	onEachListener(t, listeners, func(t *testing.T, l config.Listener, c net.Conn) {
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

// onEachListener starts listeners and runs test on each, in parallel
// subtests, with a new connection to it that gives up after 10 s.
func onEachListener(t *testing.T, listeners []config.Listener, test func(t *testing.T, l config.Listener, c net.Conn)) {
	t.Helper()
	f := fwdtest.Start(t, listeners...)
	for _, l := range listeners {
		t.Run(l.Name, func(t *testing.T) {
			t.Parallel()
			test(t, l, fwdtest.DialFor(t, f.Addr(l.Name).String(), 10*time.Second))
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
			up := fwdtest.ReadingBackend(t, func(c net.Conn, r *bufio.Reader) {
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

// Tests that a request body the client stops sending gets 408 after http.body_timeout, through every HTTP kind.

// TestStalledRequestBodiesGet408: a client that stops sending its request
// body, inside a chunk, between chunks, short of its length or past the
// size the proxy splices, gets 408 once http.body_timeout passes without
// a byte of it, from every HTTP kind. The back end reads the request and
// waits for the rest of the body, as an application server does.
func TestStalledRequestBodiesGet408(t *testing.T) {
	up := fwdtest.RawBackend(t, func(c net.Conn) { io.Copy(io.Discard, c) })
	listeners := fwdtest.HTTPListeners(t, up)
	const bodyTimeout = time.Second
	for i := range listeners {
		// A response timeout as short must not make the stall the
		// upstream's (a 504): the response's wait begins after the body.
		listeners[i].HTTP = &config.HTTP{BodyTimeout: config.Duration(bodyTimeout), ResponseTimeout: config.Duration(bodyTimeout)}
	}
	f := fwdtest.Start(t, listeners...)
	bodies := map[string]string{
		"short of its length": "Content-Length: 100\r\n\r\nhello",
		"inside a chunk":      "Transfer-Encoding: chunked\r\n\r\n5\r\nhel",
		"between chunks":      "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
		// Past the 512 KiB that http-reverse copies itself: the body goes
		// to the listener's engine, which finds nothing moving.
		"spliced": "Content-Length: 1048576\r\n\r\n" + strings.Repeat("x", 64<<10),
	}
	for _, l := range listeners {
		target := fwdtest.RequestTarget(l, up, "/obj/1KiB")
		for name, body := range bodies {
			t.Run(l.Name+"/"+name, func(t *testing.T) {
				t.Parallel()
				raw := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\n%s", target, up, body)
				start := time.Now()
				resp := fwdtest.Exchange(t, f.Addr(l.Name).String(), raw)
				took := time.Since(start)
				if resp.StatusCode != http.StatusRequestTimeout {
					t.Fatalf("%s through %s: %s after %v, want 408", name, l.Proxy, resp.Status, took)
				}
				if took < bodyTimeout {
					t.Errorf("408 after %v: before the body timeout of %v", took, bodyTimeout)
				}
			})
		}
	}
}

// TestBodyTimeoutEndsWithTheBody: body_timeout bounds only the wait for a
// body. After a whole body, a keep-alive connection of a listener whose
// idle_timeout is 0 (never) waits past body_timeout for its next request.
func TestBodyTimeoutEndsWithTheBody(t *testing.T) {
	up := fwdtest.BodyReadingOrigin(t)
	listeners := fwdtest.HTTPListeners(t, up)
	const bodyTimeout = 500 * time.Millisecond
	for i := range listeners {
		listeners[i].HTTP = &config.HTTP{BodyTimeout: config.Duration(bodyTimeout)}
		listeners[i].IdleTimeout = 0
	}
	onEachListener(t, listeners, func(t *testing.T, l config.Listener, c net.Conn) {
		r := bufio.NewReader(c)
		for i := range 2 {
			if i > 0 {
				time.Sleep(3 * bodyTimeout)
			}
			// The body comes apart from the head, so that the proxy
			// waits for it under body_timeout.
			head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Length: 5\r\n\r\n", fwdtest.RequestTarget(l, up, "/"), up)
			if _, err := c.Write([]byte(head)); err != nil {
				t.Fatalf("request %d: %v", i+1, err)
			}
			time.Sleep(bodyTimeout / 5)
			if _, err := c.Write([]byte("hello")); err != nil {
				t.Fatalf("request %d: %v", i+1, err)
			}
			if err := fwdtest.AnsweredLength(r, 5); err != nil {
				t.Fatalf("request %d: %v", i+1, err)
			}
		}
	})
}

// Tests that a keep-alive connection waits for its next request up to http.keepalive_timeout, through every HTTP kind.

// TestKeepaliveTimeoutClosesIdleConnections: a kept connection whose
// client sends nothing more is closed once http.keepalive_timeout passes
// after its last response, by every HTTP kind, though idle_timeout is an
// hour; one whose client comes back sooner is served, as often as it
// does. The close is a FIN (no answer: nobody asked), counted eof.
func TestKeepaliveTimeoutClosesIdleConnections(t *testing.T) {
	up := fwdtest.HTTPOrigin(t)
	listeners := fwdtest.HTTPListeners(t, up)
	const keepalive = 500 * time.Millisecond
	for i := range listeners {
		listeners[i].HTTP = &config.HTTP{KeepaliveTimeout: config.Duration(keepalive)}
	}
	f := fwdtest.Start(t, listeners...)
	t.Run("kinds", func(t *testing.T) {
		for _, l := range listeners {
			keptUntilTheBound(t, l.Name, f.Addr(l.Name).String(), fwdtest.RequestTarget(l, up, "/obj/1KiB"), up, keepalive)
		}
	})
	for _, l := range listeners {
		fwdtest.WaitMetric(t, f, 1, "splicer_connections_closed_total", "listener", l.Name, "reason", "eof")
	}
}

// keptUntilTheBound runs, in parallel, a client of listener name at addr
// that asks for target five times, keepalive/2 apart, and then waits for
// the proxy to close the connection, between keepalive and half as long
// again later.
func keptUntilTheBound(t *testing.T, name, addr, target, host string, keepalive time.Duration) {
	t.Run(name, func(t *testing.T) {
		t.Parallel()
		c := fwdtest.DialFor(t, addr, 10*time.Second)
		r := bufio.NewReader(c)
		get := func(i int) {
			t.Helper()
			fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, host)
			resp, err := http.ReadResponse(r, nil)
			if err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
			body, err := io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != http.StatusOK || len(body) != 1024 {
				t.Fatalf("request %d: %s, %d body bytes, %v", i, resp.Status, len(body), err)
			}
		}
		for i := range 4 { // back before the bound each time: served
			get(i)
			time.Sleep(keepalive / 2)
		}
		get(4)
		last := time.Now()
		n, err := r.Read(make([]byte, 1))
		took := time.Since(last)
		if n != 0 || err != io.EOF {
			t.Fatalf("idle connection read %d bytes, %v: want the proxy's FIN", n, err)
		}
		if took < keepalive || took > keepalive+keepalive/2 {
			t.Errorf("idle connection closed %v after its last response, want %v to %v", took, keepalive, keepalive+keepalive/2)
		}
	})
}

// Silent connections cannot hold an HTTP listener: each kind closes a connection that sends no request within request_timeout of accept, so a sixth client gets through a listener capped at five.

func TestSilentConnectionsTimeOut(t *testing.T) {
	up := fwdtest.HTTPOrigin(t)
	cfg := fwdtest.Config(t, `
listeners:
  - {name: http-forward, listen: '127.0.0.1:0', proxy: http-forward, max_connections: 5,
     http: {request_timeout: 500ms}, destinations: {allow: ['127.0.0.1']}}
  - {name: http-reverse, listen: '127.0.0.1:0', proxy: http-reverse, max_connections: 5,
     http: {request_timeout: 500ms}, pools: [{name: p, servers: ['%[1]s']}], routes: [{pool: p}]}
  - {name: filter, listen: '127.0.0.1:0', proxy: filter, max_connections: 5,
     http: {request_timeout: 500ms}, upstream: ['%[1]s']}
`, up)
	f := fwdtest.Start(t, cfg.Listeners...)
	for _, l := range cfg.Listeners {
		t.Run(l.Name, func(t *testing.T) {
			addr := f.Addr(l.Name).String()
			start := time.Now()
			for range 5 {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				// Each silent connection is closed by the forwarder.
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				go func() { c.Read(make([]byte, 1)) }()
			}
			target := fwdtest.RequestTarget(l, up, "/obj/1KiB")
			deadline := time.Now().Add(5 * time.Second)
			for {
				status, err := tryGet(addr, fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, up))
				if status == http.StatusOK {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("a sixth client still not served after %v: %d, %v", time.Since(start), status, err)
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}

// tryGet sends raw to addr and returns the response status, or the error
// of a connection the listener refused.
func tryGet(addr, raw string) (int, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(raw)); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// A peer that stalls in the middle of a body the proxy streams in control mode (chunked, or with a length http-reverse copies) is cut after idle_timeout instead of holding the pair.

func TestStalledChunkedBodyTimesOut(t *testing.T) {
	up := fwdtest.HTTPOrigin(t)
	cfg := fwdtest.Config(t, `
listeners:
  - {name: http-forward, listen: '127.0.0.1:0', proxy: http-forward, idle_timeout: 300ms, destinations: {allow: ['127.0.0.1']}}
  - {name: http-reverse, listen: '127.0.0.1:0', proxy: http-reverse, idle_timeout: 300ms, pools: [{name: p, servers: ['%[1]s']}], routes: [{pool: p}]}
  - {name: filter, listen: '127.0.0.1:0', proxy: filter, idle_timeout: 300ms, upstream: ['%[1]s']}
`, up)
	f := fwdtest.Start(t, cfg.Listeners...)
	for _, l := range cfg.Listeners {
		t.Run(l.Name, func(t *testing.T) {
			c, err := net.Dial("tcp", f.Addr(l.Name).String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			target := fwdtest.RequestTarget(l, up, "/obj/10")
			// Half a chunk, then silence.
			fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: %s\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel", target, up)
			start := time.Now()
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			io.ReadAll(c)
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("a stalled chunked body held the pair %v with idle_timeout 300ms", d)
			}
		})
	}
}

// TestStalledLengthBodyTimesOut: an upstream that sends 100 KiB of a
// 400 KiB response body and then nothing, its connection open: the rest,
// which http-reverse relays in control mode (below the engines' floor;
// through the kernel or its buffer, kernelcopy_test.go), ends at
// idle_timeout, and the client never sees the body whole.
func TestStalledLengthBodyTimesOut(t *testing.T) {
	const size, sent = 400 << 10, 100 << 10
	up := fwdtest.RawBackend(t, func(c net.Conn) {
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			return
		}
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", size)
		c.Write(make([]byte, sent))
		time.Sleep(8 * time.Second) // silence, the connection open
	})
	cfg := fwdtest.Config(t, `
listeners:
  - {name: rev, listen: '127.0.0.1:0', proxy: http-reverse, idle_timeout: 300ms, pools: [{name: p, servers: ['%s']}], routes: [{pool: p}]}
`, up)
	f := fwdtest.Start(t, cfg.Listeners...)
	c, err := net.Dial("tcp", f.Addr("rev").String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /obj HTTP/1.1\r\nHost: app.example\r\n\r\n")
	start := time.Now()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("a stalled body held the pair %v with idle_timeout 300ms", d)
	}
	if err == nil || n >= size {
		t.Errorf("the client read %d bytes of %d and %v: a cut body looked whole", n, size, err)
	}
	t.Logf("cut after %v with %d bytes read: %v", time.Since(start).Round(time.Millisecond), n, err)
}

// A request body trickled just within body_timeout is still bounded: http.body_min_rate gives it 408 once it falls behind, through http-forward and http-reverse.

// TestTrickledRequestBodiesGet408: a client that sends its request body a
// byte every 300 ms never waits body_timeout (1 s) for one, but falls
// behind body_min_rate (64 KiB/s after a grace of body_timeout): it gets
// 408 within seconds, whether the body is copied, chunked or spliced,
// and the back end never gets a whole request.
func TestTrickledRequestBodiesGet408(t *testing.T) {
	o := fwdtest.NewRecordingOrigin(t)
	var listeners []config.Listener
	for _, l := range fwdtest.HTTPListeners(t, o.Addr) {
		if l.Proxy == "filter" {
			continue // the filter relays bodies its own way
		}
		l.HTTP = &config.HTTP{BodyTimeout: config.Duration(time.Second), BodyMinRate: 64 << 10}
		listeners = append(listeners, l)
	}
	f := fwdtest.Start(t, listeners...)
	bodies := map[string]struct{ head, first, trickle string }{
		"copied":  {"Content-Length: 40\r\n", "", strings.Repeat("x", 40)},
		"chunked": {"Transfer-Encoding: chunked\r\n", "", strings.Repeat("1\r\nx\r\n", 10) + "0\r\n\r\n"},
		// Past what the proxies copy themselves: the engine splices it.
		"spliced": {"Content-Length: 1048576\r\n", strings.Repeat("x", 64<<10), strings.Repeat("x", 1<<20-64<<10)},
	}
	for _, l := range listeners {
		for name, b := range bodies {
			t.Run(l.Name+"/"+name, func(t *testing.T) {
				t.Parallel()
				c := fwdtest.DialFor(t, f.Addr(l.Name).String(), 15*time.Second)
				head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", fwdtest.RequestTarget(l, o.Addr, "/"+name), o.Addr, b.head)
				if _, err := c.Write([]byte(head + b.first)); err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				go trickle(c, b.trickle, 300*time.Millisecond)
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					t.Fatalf("no answer after %v: %v", time.Since(start), err)
				}
				if resp.StatusCode != http.StatusRequestTimeout {
					t.Fatalf("%s after %v, want 408", resp.Status, time.Since(start))
				}
				for _, req := range o.Requests() {
					if req.URL.Path == "/"+name {
						t.Errorf("the back end received the whole trickled %s body", name)
					}
				}
			})
		}
	}
}

// trickle writes s to c a byte every interval until it is written or c fails.
func trickle(c net.Conn, s string, interval time.Duration) {
	for i := range len(s) {
		time.Sleep(interval)
		if _, err := c.Write([]byte{s[i]}); err != nil {
			return
		}
	}
}
