// Every HTTP kind (http-forward, http-reverse, filter) answers 400 to the heads that let two parsers frame a request differently, 501 to a transfer coding it does not know, and still serves an ordinary request after them.

package all_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder/fwdtest"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/proxy/proxytest"
)

// httpOrigin serves the origin's HTTP protocol on loopback.
func httpOrigin(tb testing.TB) string { return fwdtest.HTTPOrigin(tb) }

// dialReverse starts an http-reverse listener with engine in front of
// upstream and returns a connection to it, closed when the test ends.
func dialReverse(tb testing.TB, engine, upstream string) net.Conn {
	tb.Helper()
	cfg := parseYAML(tb, `
listeners:
  - {name: rev, listen: '127.0.0.1:0', proxy: http-reverse, engine: %s, pools: [{name: p, servers: ['%s']}], routes: [{pool: p}]}
`, engine, upstream)
	f := fwdtest.Start(tb, cfg.Listeners...)
	c, err := net.Dial("tcp", f.Addr("rev").String())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// rawBackend runs serve on every connection to a loopback port until the
// test ends, and returns the address.
func rawBackend(tb testing.TB, serve func(c net.Conn)) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	fwdtest.ServeEach(tb, ln, 10*time.Second, serve)
	return ln.Addr().String()
}

// httpBackend serves h with net/http on a loopback port until the test
// ends, and returns the address.
func httpBackend(tb testing.TB, h http.HandlerFunc) string {
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

// parseYAML parses a configuration made of format and args, failing tb
// on any error.
func parseYAML(tb testing.TB, format string, args ...any) *config.Config {
	tb.Helper()
	cfg, err := config.Parse("test.yaml", []byte(fmt.Sprintf(format, args...)))
	if err != nil {
		tb.Fatal(err)
	}
	return cfg
}

// httpListeners are one listener of each HTTP kind in front of up.
func httpListeners(tb testing.TB, up string) []config.Listener {
	tb.Helper()
	cfg := parseYAML(tb, `
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

// requestTarget is path on up as a request to l names it: in absolute form
// for http-forward (whose clients name the origin), as is otherwise.
func requestTarget(l config.Listener, up, path string) string {
	if l.Proxy == "http-forward" {
		return "http://" + up + path
	}
	return path
}

// dialFor connects to addr for a test: the connection gives up after d
// and is closed when the test ends, if not before.
func dialFor(tb testing.TB, addr string, d time.Duration) net.Conn {
	tb.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(d))
	return c
}

// exchange sends raw on a new connection to addr and reads the response.
func exchange(tb testing.TB, addr, raw string) *http.Response {
	tb.Helper()
	return exchangeThen(tb, addr, raw, false)
}

// exchangeHalfClosed is exchange with the connection half-closed after raw
// (the client has nothing more to send).
func exchangeHalfClosed(tb testing.TB, addr, raw string) *http.Response {
	tb.Helper()
	return exchangeThen(tb, addr, raw, true)
}

func exchangeThen(tb testing.TB, addr, raw string, halfClose bool) *http.Response {
	tb.Helper()
	resp := send(tb, addr, raw, halfClose)
	resp.Body.Close()
	return resp
}

// send sends raw on a new connection to addr, half-closed after it if
// halfClose, and returns the response, its body unread.
func send(tb testing.TB, addr, raw string, halfClose bool) *http.Response {
	tb.Helper()
	c := dialFor(tb, addr, 5*time.Second)
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

// TestSmugglingHeadsGet400 sends each head to an origin that would take
// it (a lenient one, with no parser to refuse anything), so a 400 and no
// byte at the origin are the proxy's doing.
func TestSmugglingHeadsGet400(t *testing.T) {
	o := proxytest.NewLenientOrigin(t)
	up := o.Addr
	listeners := httpListeners(t, up)
	f := fwdtest.Start(t, listeners...)
	heads := map[string]string{
		"space before colon": "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Length : 5\r\n\r\nhello",
		"obs-folded TE":      "POST %s HTTP/1.1\r\nHost: %s\r\nX-A: 1\r\n Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\nhello",
		"CL and TE":          "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"TE in HTTP/1.0":     "POST %s HTTP/1.0\r\nHost: %s\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"no Host in 1.1":     "GET %s HTTP/1.1\r\nX-Host: %s\r\n\r\n",
		"two Hosts":          "GET %s HTTP/1.1\r\nHost: %s\r\nHost: other\r\n\r\n",
		"Host with a quote":  "GET %s HTTP/1.1\r\nHost: %s\",for=203.0.113.66;x=\"\r\n\r\n",
	}
	for _, l := range listeners {
		addr := f.Addr(l.Name).String()
		target := requestTarget(l, up, "/obj/1KiB")
		for name, head := range heads {
			t.Run(l.Name+"/"+name, func(t *testing.T) {
				resp := o.Refused(t, addr, fmt.Sprintf(head, target, up))
				if resp.StatusCode != http.StatusBadRequest {
					t.Errorf("%s through %s: %s, want 400", name, l.Proxy, resp.Status)
				}
			})
		}
		t.Run(l.Name+"/ordinary request", func(t *testing.T) {
			before := o.Requests()
			resp := exchange(t, addr, fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, up))
			if resp.StatusCode != http.StatusOK || o.Requests() != before+1 {
				t.Errorf("an ordinary GET through %s: %s, %d requests at the origin, want 200 and 1", l.Proxy, resp.Status, o.Requests()-before)
			}
		})
	}
}

// TestBadRequestBodiesGet400: a request body that the client gets wrong
// (a chunk size that is no number or has a space before it, fewer bytes
// than its Content-Length, a chunk cut short or not ended by CRLF) is the
// client's fault: every HTTP kind answers 400 and closes, where it
// answered 502 as if the upstream had failed (and the filter passed the
// spaces on). The origin reads each body to its end before it answers,
// as an upload handler does: one that answered first (the lab origin's
// 405 to a POST) would race the filter, which streams the body beside
// the response.
func TestBadRequestBodiesGet400(t *testing.T) {
	up := bodyReadingOrigin(t)
	listeners := httpListeners(t, up)
	f := fwdtest.Start(t, listeners...)
	bodies := map[string]string{
		"chunk size not a number": "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n\r\n",
		"short of its length":     "Content-Length: 100\r\n\r\nhello",
		"chunk cut short":         "Transfer-Encoding: chunked\r\n\r\n5\r\nhel",
		// Lenient framings that a next hop could read otherwise (RFC
		// 9112 7.1: chunk-size is hex digits, the data ends in CRLF).
		"space before chunk size": "Transfer-Encoding: chunked\r\n\r\n 5\r\nhello\r\n0\r\n\r\n",
		"space after chunk data":  "Transfer-Encoding: chunked\r\n\r\n5\r\nhello \r\n0\r\n\r\n",
	}
	for _, l := range listeners {
		target := requestTarget(l, up, "/obj/1KiB")
		for name, body := range bodies {
			t.Run(l.Name+"/"+name, func(t *testing.T) {
				raw := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\n%s", target, up, body)
				resp := exchangeHalfClosed(t, f.Addr(l.Name).String(), raw)
				if resp.StatusCode != http.StatusBadRequest {
					t.Errorf("%s through %s: %s, want 400", name, l.Proxy, resp.Status)
				}
			})
		}
	}
}

// TestUnsupportedTransferCodingsGet501: a request body in a transfer
// coding other than chunked alone gets 501 (RFC 9112 6.1) from every HTTP
// kind, where it got 400 as a malformed request, and the pair is counted
// as the client's bad request; "Chunked" in any case passes.
func TestUnsupportedTransferCodingsGet501(t *testing.T) {
	up := bodyReadingOrigin(t)
	listeners := httpListeners(t, up)
	f := fwdtest.Start(t, listeners...)
	for _, l := range listeners {
		target := requestTarget(l, up, "/")
		t.Run(l.Name, func(t *testing.T) {
			for coding, want := range map[string]int{"gzip, chunked": http.StatusNotImplemented, "gzip": http.StatusNotImplemented, "Chunked": http.StatusOK} {
				raw := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nTransfer-Encoding: %s\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n", target, up, coding)
				if resp := exchange(t, f.Addr(l.Name).String(), raw); resp.StatusCode != want {
					t.Errorf("Transfer-Encoding: %s through %s: %s, want %d", coding, l.Proxy, resp.Status, want)
				}
			}
			testenv.Eventually(t, "the two 501s' pairs closed with reason bad_request", func() bool {
				return fwdtest.Metric(f, "splicer_connections_closed_total", "listener", l.Name, "reason", "bad_request") == 2
			})
		})
	}
}
