// Tests that http.max_body_bytes answers 413 to a larger request body, through every HTTP kind, and lets a body of its size through.

package all_test

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder/fwdtest"
	"github.com/splicer/splicer/internal/config"
)

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
