// http-reverse's forwarding fields cannot be deleted or spoofed by the client: hop-by-hop removal runs before the proxy adds them, and an untrusted client's own Forwarded and X-Forwarded-For are replaced.

package httprev_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder/fwdtest"
	"github.com/splicer/splicer/internal/testenv"
)

// headerEcho answers every request with its Forwarded and X-Forwarded-For.
func headerEcho(tb testing.TB) string {
	tb.Helper()
	return fwdtest.ReadingBackend(tb, func(c net.Conn, r *bufio.Reader) {
		testenv.EachRequest(r, func(req *http.Request, _ []byte) bool {
			body := fmt.Sprintf("F=%s|X=%s", strings.Join(req.Header.Values("Forwarded"), ","), strings.Join(req.Header.Values("X-Forwarded-For"), ","))
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			return true
		})
	})
}

func TestForwardedFields(t *testing.T) {
	backend := headerEcho(t)
	cfg := fwdtest.Config(t, `
listeners:
  - {name: rev, listen: '127.0.0.1:0', proxy: http-reverse, pools: [{name: p, servers: ['%[1]s']}], routes: [{pool: p}]}
  - {name: trusting, listen: '127.0.0.1:0', proxy: http-reverse, http: {trusted_proxies: ['127.0.0.1']},
     pools: [{name: p, servers: ['%[1]s']}], routes: [{pool: p}]}
`, backend)
	f := fwdtest.Start(t, cfg.Listeners...)
	get := func(listener, extra string) string {
		c := fwdtest.DialFor(t, f.Addr(listener).String(), 5*time.Second)
		defer c.Close()
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: app.example\r\n%s\r\n", extra)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, resp.ContentLength))
		return string(b)
	}
	own := `F=for=127.0.0.1;proto=http;host="app.example"|X=127.0.0.1`
	if got := get("rev", "Connection: X-Forwarded-For, Forwarded\r\n"); got != own {
		t.Errorf("Connection naming the forwarding fields: back-end saw %q, want %q", got, own)
	}
	spoof := "Forwarded: for=203.0.113.66\r\nX-Forwarded-For: 203.0.113.66\r\n"
	if got := get("rev", spoof); got != own {
		t.Errorf("an untrusted client's forwarding fields: back-end saw %q, want them replaced: %q", got, own)
	}
	if got := get("trusting", spoof); !strings.Contains(got, "203.0.113.66") || !strings.Contains(got, "127.0.0.1") {
		t.Errorf("a trusted proxy's forwarding fields: back-end saw %q, want them kept and appended to", got)
	}
}
