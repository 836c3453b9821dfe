// Tests that a header line longer than a read buffer (a long cookie) passes every HTTP kind both ways, within max_header_bytes, and a head over it gets 431.

package all_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

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
	up := httpBackend(t, func(w http.ResponseWriter, r *http.Request) {
		if got := r.Header.Get("Cookie"); got != "k="+cookie {
			http.Error(w, fmt.Sprintf("the Cookie arrived as %d bytes", len(got)), http.StatusBadRequest)
			return
		}
		w.Header().Set("Set-Cookie", "k="+cookie)
		fmt.Fprint(w, "ok")
	})
	listeners := httpListeners(t, up)
	f := fwdtest.Start(t, listeners...)
	for _, l := range listeners {
		addr, target := f.Addr(l.Name).String(), requestTarget(l, up, "/")
		t.Run(l.Name+"/20 KiB lines", func(t *testing.T) {
			resp := exchange(t, addr, fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\nCookie: k=%s\r\n\r\n", target, up, cookie))
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("through %s: %s, want 200", l.Proxy, resp.Status)
			}
			if got := resp.Header.Get("Set-Cookie"); got != "k="+cookie {
				t.Errorf("through %s: Set-Cookie of %d bytes, want %d", l.Proxy, len(got), len(cookie)+2)
			}
		})
		t.Run(l.Name+"/40 KiB head", func(t *testing.T) {
			big := strings.Repeat("b", 40<<10)
			resp := exchange(t, addr, fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\nX-Big: %s\r\n\r\n", target, up, big))
			if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
				t.Errorf("through %s: %s, want 431", l.Proxy, resp.Status)
			}
		})
	}
}
