// HTTP through an in-process forwarder: back ends on loopback, listeners of each HTTP kind, a client that sends raw heads and reads the response.

package fwdtest

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/testenv"
)

// RawBackend runs serve on every connection to a loopback port until the
// test ends, and returns the address.
func RawBackend(tb testing.TB, serve func(c net.Conn)) string {
	tb.Helper()
	ln := testenv.ListenLoopback(tb)
	testenv.ServeEach(tb, ln, 10*time.Second, serve)
	return ln.Addr().String()
}

// ReadingBackend is RawBackend with a reader of c for serve: a back end
// that reads requests and writes answers of its own.
func ReadingBackend(tb testing.TB, serve func(c net.Conn, r *bufio.Reader)) string {
	tb.Helper()
	return RawBackend(tb, func(c net.Conn) { serve(c, bufio.NewReader(c)) })
}

// HTTPBackend serves h with net/http on a loopback port until the test
// ends, and returns the address.
func HTTPBackend(tb testing.TB, h http.HandlerFunc) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	tb.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// BodyReadingOrigin is a loopback HTTP server that reads each request's
// body and answers its length (AnsweredLength reads the answer).
func BodyReadingOrigin(tb testing.TB) string {
	tb.Helper()
	return HTTPBackend(tb, func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprint(w, n)
	})
}

// AnsweredLength reads BodyReadingOrigin's answer from r: nil if it is 200
// with the length n.
func AnsweredLength(r *bufio.Reader, n int) error {
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		return err
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK || string(body) != strconv.Itoa(n) {
		return fmt.Errorf("%s %q %v, want 200 and the body's length %d", resp.Status, body, err, n)
	}
	return nil
}

// AnswerEveryHead writes resp for every request head c sends, reading
// into one buffer: a back end that allocates nothing per request.
func AnswerEveryHead(c net.Conn, resp []byte) {
	buf := make([]byte, 4<<10)
	n := 0
	for {
		k, err := c.Read(buf[n:])
		if err != nil {
			return
		}
		n += k
		for {
			end := bytes.Index(buf[:n], []byte("\r\n\r\n"))
			if end < 0 {
				break
			}
			if _, err := c.Write(resp); err != nil {
				return
			}
			n = copy(buf, buf[end+4:n])
		}
	}
}

// ReadRawHead reads a request head from c, up to its empty line.
func ReadRawHead(c net.Conn) (string, error) {
	var head []byte
	buf := make([]byte, 1)
	for !strings.HasSuffix(string(head), "\r\n\r\n") {
		if _, err := c.Read(buf); err != nil {
			return string(head), err
		}
		head = append(head, buf[0])
	}
	return string(head), nil
}

// Config parses a configuration made of format and args, failing tb on
// any error.
func Config(tb testing.TB, format string, args ...any) *config.Config {
	tb.Helper()
	cfg, err := config.Parse("test.yaml", []byte(fmt.Sprintf(format, args...)))
	if err != nil {
		tb.Fatal(err)
	}
	return cfg
}

// HTTPListeners are one listener of each HTTP kind in front of up, named
// after their kind.
func HTTPListeners(tb testing.TB, up string) []config.Listener {
	tb.Helper()
	cfg := Config(tb, `
listeners:
  - {name: http-forward, listen: '127.0.0.1:0', proxy: http-forward, destinations: {allow: ['127.0.0.1']}}
  - name: http-reverse
    listen: '127.0.0.1:0'
    proxy: http-reverse
    pools: [{name: p, servers: ['%[1]s']}]
    routes: [{pool: p}]
  - {name: filter, listen: '127.0.0.1:0', proxy: filter, upstream: ['%[1]s']}
`, up)
	return cfg.Listeners
}

// RequestTarget is path on up as a request to l names it: in absolute
// form for http-forward (whose clients name the origin), as is otherwise.
func RequestTarget(l config.Listener, up, path string) string {
	if l.Proxy == "http-forward" {
		return "http://" + up + path
	}
	return path
}

// ReverseProxy starts an http-reverse listener "rev" with engine in front
// of servers (a pool "p", round robin), with extra YAML flow-map keys.
func ReverseProxy(tb testing.TB, engine, extra string, servers ...string) *forwarder.Forwarder {
	tb.Helper()
	cfg := Config(tb, `
listeners:
  - {name: rev, listen: '127.0.0.1:0', proxy: http-reverse, engine: %s, pools: [{name: p, servers: ['%s']}], routes: [{pool: p}]%s}
`, engine, strings.Join(servers, "', '"), extra)
	return Start(tb, cfg.Listeners...)
}

// DialFor connects to addr for a test: the connection gives up after d
// and is closed when the test ends, if not before.
func DialFor(tb testing.TB, addr string, d time.Duration) net.Conn {
	tb.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(d))
	return c
}

// Exchange sends raw on a new connection to addr and reads the response.
func Exchange(tb testing.TB, addr, raw string) *http.Response {
	tb.Helper()
	return exchangeThen(tb, addr, raw, false)
}

// ExchangeHalfClosed is Exchange with the connection half-closed after raw
// (the client has nothing more to send).
func ExchangeHalfClosed(tb testing.TB, addr, raw string) *http.Response {
	tb.Helper()
	return exchangeThen(tb, addr, raw, true)
}

func exchangeThen(tb testing.TB, addr, raw string, halfClose bool) *http.Response {
	tb.Helper()
	resp := Send(tb, addr, raw, halfClose)
	resp.Body.Close()
	return resp
}

// Send sends raw on a new connection to addr, half-closed after it if
// halfClose, and returns the response, its body unread.
func Send(tb testing.TB, addr, raw string, halfClose bool) *http.Response {
	tb.Helper()
	c := DialFor(tb, addr, 5*time.Second)
	if _, err := c.Write([]byte(raw)); err != nil {
		tb.Fatal(err)
	}
	if halfClose {
		c.(*net.TCPConn).CloseWrite()
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		tb.Fatalf("response to %.200q: %v", raw, err)
	}
	return resp
}

// WaitMetric waits for f's metric name with labels to be want.
func WaitMetric(tb testing.TB, f *forwarder.Forwarder, want float64, name string, labels ...string) {
	tb.Helper()
	testenv.EventuallyShowing(tb, fmt.Sprintf("%s%v = %v", name, labels, want),
		func() bool { return Metric(f, name, labels...) == want },
		func() string { return fmt.Sprint(Metric(f, name, labels...)) })
}
