// Heads and bodies at the edges of what HTTP/1.x allows, through every HTTP kind: framings two parsers could read differently get 400, unknown codings 501, heads over max_header_bytes 431, bodies over max_body_bytes 413; long lines and HTTP/1.0 pass.

package all_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder/fwdtest"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/proxy/proxytest"
)

// Every HTTP kind (http-forward, http-reverse, filter) answers 400 to the heads that let two parsers frame a request differently, 501 to a transfer coding it does not know, and still serves an ordinary request after them.

// TestSmugglingHeadsGet400 sends each head to an origin that would take
// it (a lenient one, with no parser to refuse anything), so a 400 and no
// byte at the origin are the proxy's doing.
func TestSmugglingHeadsGet400(t *testing.T) {
	o := proxytest.NewLenientOrigin(t)
	up := o.Addr
	listeners := fwdtest.HTTPListeners(t, up)
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
		target := fwdtest.RequestTarget(l, up, "/obj/1KiB")
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
			resp := fwdtest.Exchange(t, addr, fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, up))
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
	up := fwdtest.BodyReadingOrigin(t)
	listeners := fwdtest.HTTPListeners(t, up)
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
		target := fwdtest.RequestTarget(l, up, "/obj/1KiB")
		for name, body := range bodies {
			t.Run(l.Name+"/"+name, func(t *testing.T) {
				raw := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\n%s", target, up, body)
				resp := fwdtest.ExchangeHalfClosed(t, f.Addr(l.Name).String(), raw)
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
	up := fwdtest.BodyReadingOrigin(t)
	listeners := fwdtest.HTTPListeners(t, up)
	f := fwdtest.Start(t, listeners...)
	for _, l := range listeners {
		target := fwdtest.RequestTarget(l, up, "/")
		t.Run(l.Name, func(t *testing.T) {
			for coding, want := range map[string]int{"gzip, chunked": http.StatusNotImplemented, "gzip": http.StatusNotImplemented, "Chunked": http.StatusOK} {
				raw := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nTransfer-Encoding: %s\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n", target, up, coding)
				if resp := fwdtest.Exchange(t, f.Addr(l.Name).String(), raw); resp.StatusCode != want {
					t.Errorf("Transfer-Encoding: %s through %s: %s, want %d", coding, l.Proxy, resp.Status, want)
				}
			}
			testenv.Eventually(t, "the two 501s' pairs closed with reason bad_request", func() bool {
				return fwdtest.Metric(f, "splicer_connections_closed_total", "listener", l.Name, "reason", "bad_request") == 2
			})
		})
	}
}

// Tests of heads at the edges of what HTTP/1.x allows: a header line longer than a read buffer (a long cookie) passes every HTTP kind both ways, a head over max_header_bytes gets 431, an HTTP/1.0 request without Host goes on without one, and an HTTP/1.0 answer goes on as HTTP/1.1.

// TestLongHeaderLinesPass: a request with a 20 KiB Cookie and a response
// with a 20 KiB Set-Cookie, lines longer than any of the proxies' read
// buffers (the filter's 4 KiB, http-forward's and http-reverse's 16 KiB),
// go through every HTTP kind whole (the filter answered 431 once a line
// passed its buffer); a request head of 40 KiB, over the default
// max_header_bytes of 32 KiB, gets 431 from each.
func TestLongHeaderLinesPass(t *testing.T) {
	cookie := strings.Repeat("c", 20<<10)
	up := fwdtest.HTTPBackend(t, func(w http.ResponseWriter, r *http.Request) {
		if got := r.Header.Get("Cookie"); got != "k="+cookie {
			http.Error(w, fmt.Sprintf("the Cookie arrived as %d bytes", len(got)), http.StatusBadRequest)
			return
		}
		w.Header().Set("Set-Cookie", "k="+cookie)
		fmt.Fprint(w, "ok")
	})
	listeners := fwdtest.HTTPListeners(t, up)
	f := fwdtest.Start(t, listeners...)
	for _, l := range listeners {
		addr, target := f.Addr(l.Name).String(), fwdtest.RequestTarget(l, up, "/")
		t.Run(l.Name+"/20 KiB lines", func(t *testing.T) {
			resp := fwdtest.Exchange(t, addr, fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\nCookie: k=%s\r\n\r\n", target, up, cookie))
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("through %s: %s, want 200", l.Proxy, resp.Status)
			}
			if got := resp.Header.Get("Set-Cookie"); got != "k="+cookie {
				t.Errorf("through %s: Set-Cookie of %d bytes, want %d", l.Proxy, len(got), len(cookie)+2)
			}
		})
		t.Run(l.Name+"/40 KiB head", func(t *testing.T) {
			big := strings.Repeat("b", 40<<10)
			resp := fwdtest.Exchange(t, addr, fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\nX-Big: %s\r\n\r\n", target, up, big))
			if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
				t.Errorf("through %s: %s, want 431", l.Proxy, resp.Status)
			}
		})
	}
}

// TestHTTP10WithoutHostGoesOnWithoutHost: an HTTP/1.0 request may name no
// Host; http-reverse and the filter pass it on without one, where
// http-reverse sent an empty "Host:" field, which nginx refuses (400).
// (http-forward's requests name their origin.)
func TestHTTP10WithoutHostGoesOnWithoutHost(t *testing.T) {
	up := fwdtest.RawBackend(t, func(c net.Conn) {
		head, err := fwdtest.ReadRawHead(c)
		answer := "no Host field"
		switch {
		case err != nil:
			answer = err.Error()
		case strings.Contains(strings.ToLower(head), "\r\nhost:"):
			answer = "a Host field: " + strconv.Quote(head)
		}
		fmt.Fprintf(c, "HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(answer), answer)
	})
	listeners := fwdtest.HTTPListeners(t, up)
	f := fwdtest.Start(t, listeners...)
	for _, l := range listeners {
		if l.Proxy == "http-forward" {
			continue // its request names the origin, and so a Host
		}
		t.Run(l.Name, func(t *testing.T) {
			resp := exchangeBody(t, f.Addr(l.Name).String(), "GET /obj HTTP/1.0\r\n\r\n")
			if resp != "no Host field" {
				t.Errorf("through %s the upstream got %s", l.Proxy, resp)
			}
		})
	}
}

// exchangeBody sends raw on a new connection to addr and returns the
// response's body.
func exchangeBody(tb testing.TB, addr, raw string) string {
	tb.Helper()
	resp := fwdtest.Send(tb, addr, raw, false)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return string(body)
}

// TestHTTP10AnswersGoOnAsHTTP11: http-forward and http-reverse send their
// own version, HTTP/1.1, whatever the upstream's: an HTTP/1.0 answer
// passed on as such told an HTTP/1.1 client that the connection closes
// after it, while the proxy kept it open for the next request. (The
// filter passes heads on as they came.)
func TestHTTP10AnswersGoOnAsHTTP11(t *testing.T) {
	up := fwdtest.ReadingBackend(t, func(c net.Conn, r *bufio.Reader) {
		testenv.EachRequest(r, func(*http.Request, []byte) bool {
			io.WriteString(c, "HTTP/1.0 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nok")
			return true
		})
	})
	listeners := fwdtest.HTTPListeners(t, up)
	f := fwdtest.Start(t, listeners...)
	for _, l := range listeners {
		if l.Proxy == "filter" {
			continue
		}
		t.Run(l.Name, func(t *testing.T) {
			c := fwdtest.DialFor(t, f.Addr(l.Name).String(), 5*time.Second)
			r := bufio.NewReader(c)
			for i := range 2 {
				fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", fwdtest.RequestTarget(l, up, "/"), up)
				resp, err := http.ReadResponse(r, nil)
				if err != nil {
					t.Fatalf("request %d on one connection: %v", i+1, err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.Proto != "HTTP/1.1" || resp.Close {
					t.Fatalf("request %d through %s: %s, close %v; want HTTP/1.1 and the connection kept", i+1, l.Proxy, resp.Proto, resp.Close)
				}
			}
		})
	}
}

// Tests that http.max_body_bytes answers 413 to a larger request body, through every HTTP kind, and lets a body of its size through.

// bodyLog is an origin that reads each request body and answers its
// length, and remembers what it read: the paths of the requests it saw,
// and the lengths of the bodies it got whole.
type bodyLog struct {
	mu    sync.Mutex
	paths map[string]bool
	whole []int64
}

func (b *bodyLog) serve(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	b.paths[r.URL.Path] = true
	b.mu.Unlock()
	n, err := io.Copy(io.Discard, r.Body)
	if err == nil {
		b.mu.Lock()
		b.whole = append(b.whole, n)
		b.mu.Unlock()
	}
	fmt.Fprint(w, n)
}

// saw reports whether a request for path reached the origin.
func (b *bodyLog) saw(path string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.paths[path]
}

// wholeBodies returns the lengths of the bodies got whole so far.
func (b *bodyLog) wholeBodies() []int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]int64(nil), b.whole...)
}

// chunked frames body as chunks of at most size bytes, with the last chunk.
func chunked(body string, size int) string {
	var sb strings.Builder
	for len(body) > 0 {
		n := min(size, len(body))
		fmt.Fprintf(&sb, "%x\r\n%s\r\n", n, body[:n])
		body = body[n:]
	}
	return sb.String() + "0\r\n\r\n"
}

// TestRequestBodiesOverMaxBodyBytesGet413: with http.max_body_bytes, every
// HTTP kind answers 413 and closes for a body larger than the bound: one
// whose Content-Length says so before any upstream hears of the request
// (a client that asked for 100 Continue gets the 413 instead), a chunked
// one once its chunks pass the bound, and the upstream never gets such a
// body whole. A body of exactly the bound, either way, goes through.
func TestRequestBodiesOverMaxBodyBytesGet413(t *testing.T) {
	const max = 1024
	origin := &bodyLog{paths: map[string]bool{}}
	up := fwdtest.HTTPBackend(t, origin.serve)
	listeners := fwdtest.HTTPListeners(t, up)
	for i := range listeners {
		listeners[i].HTTP = &config.HTTP{MaxBodyBytes: max}
	}
	f := fwdtest.Start(t, listeners...)
	at, over := strings.Repeat("a", max), strings.Repeat("o", max+1)
	for _, l := range listeners {
		addr := f.Addr(l.Name).String()
		post := func(fields, body string) string {
			return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\n%s\r\n%s", fwdtest.RequestTarget(l, up, "/upload"), up, fields, body)
		}
		t.Run(l.Name+"/length over the bound", func(t *testing.T) {
			path := "/over/" + l.Name
			raw := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n%s", fwdtest.RequestTarget(l, up, path), up, len(over), over)
			resp := fwdtest.ExchangeHalfClosed(t, addr, raw)
			if resp.StatusCode != http.StatusRequestEntityTooLarge {
				t.Fatalf("%d bytes through %s: %s, want 413", len(over), l.Proxy, resp.Status)
			}
			if origin.saw(path) {
				t.Errorf("the upstream saw the request: the 413 must come before any upstream hears of it")
			}
		})
		t.Run(l.Name+"/100-continue over the bound", func(t *testing.T) {
			c := fwdtest.DialFor(t, addr, 5*time.Second)
			if _, err := io.WriteString(c, post("Content-Length: 1048576\r\nExpect: 100-continue\r\n", "")); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestEntityTooLarge {
				t.Fatalf("a 1 MiB body announced with Expect: 100-continue through %s: %s first, want 413", l.Proxy, resp.Status)
			}
		})
		t.Run(l.Name+"/chunked over the bound", func(t *testing.T) {
			resp := fwdtest.ExchangeHalfClosed(t, addr, post("Transfer-Encoding: chunked\r\n", chunked(over, 300)))
			if resp.StatusCode != http.StatusRequestEntityTooLarge {
				t.Fatalf("%d chunked bytes through %s: %s, want 413", len(over), l.Proxy, resp.Status)
			}
		})
		for name, raw := range map[string]string{
			"length at the bound":  post(fmt.Sprintf("Content-Length: %d\r\n", len(at)), at),
			"chunked at the bound": post("Transfer-Encoding: chunked\r\n", chunked(at, 300)),
		} {
			t.Run(l.Name+"/"+name, func(t *testing.T) {
				c := fwdtest.DialFor(t, addr, 5*time.Second)
				if _, err := io.WriteString(c, raw); err != nil {
					t.Fatal(err)
				}
				if err := fwdtest.AnsweredLength(bufio.NewReader(c), max); err != nil {
					t.Fatalf("%s through %s: %v", name, l.Proxy, err)
				}
			})
		}
	}
	if whole := origin.wholeBodies(); len(whole) == 0 {
		t.Error("the upstream got no body whole: not even those at the bound")
	} else {
		for _, n := range whole {
			if n > max {
				t.Errorf("the upstream got a body of %d bytes whole, past the bound of %d", n, max)
			}
		}
	}
}
