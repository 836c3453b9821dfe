// Tests of heads at the edges of what HTTP/1.x allows: a header line longer than a read buffer (a long cookie) passes every HTTP kind both ways, a head over max_header_bytes gets 431, an HTTP/1.0 request without Host goes on without one, and an HTTP/1.0 answer goes on as HTTP/1.1.

package all_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder/fwdtest"
)

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
	up := fwdtest.RawBackend(t, func(c net.Conn) {
		r := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(r)
			if err != nil {
				return
			}
			req.Body.Close()
			io.WriteString(c, "HTTP/1.0 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nok")
		}
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
