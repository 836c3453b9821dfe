// http-reverse and http-forward send a PROXY protocol header (v1, v2) on each new upstream connection: a back-end that reads it learns the client's address.

package all_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder/fwdtest"
	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/proxy/proxyproto"
)

// proxyProtoBackend reads a PROXY header, then answers each request on the
// connection with the source address the header gave.
func proxyProtoBackend(tb testing.TB) string {
	tb.Helper()
	return fwdtest.ReadingBackend(tb, func(c net.Conn, r *bufio.Reader) {
		info, err := proxyproto.Read(r)
		src := fmt.Sprintf("v%d %s", info.Version, info.Source)
		if err != nil {
			src = "no header: " + err.Error()
		}
		testenv.EachRequest(r, func(*http.Request, []byte) bool {
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(src), src)
			return true
		})
	})
}

func TestHTTPKindsSendProxyProtocol(t *testing.T) {
	backend := proxyProtoBackend(t)
	cfg := fwdtest.Config(t, `
listeners:
  - name: rev
    listen: '127.0.0.1:0'
    proxy: http-reverse
    proxy_protocol: v2
    pools: [{name: p, servers: ['%[1]s']}]
    routes: [{pool: p}]
  - {name: fwd, listen: '127.0.0.1:0', proxy: http-forward, proxy_protocol: v1, destinations: {allow: ['%[1]s']}}
`, backend)
	f := fwdtest.Start(t, cfg.Listeners...)
	for name, want := range map[string]string{"rev": "v2", "fwd": "v1"} {
		c := fwdtest.DialFor(t, f.Addr(name).String(), 5*time.Second)
		defer c.Close()
		target := "/x"
		if name == "fwd" {
			target = "http://" + backend + "/x"
		}
		r := bufio.NewReader(c)
		for i := 0; i < 2; i++ { // the second request reuses the back-end connection: one header
			fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, backend)
			resp, err := http.ReadResponse(r, nil)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			body := make([]byte, resp.ContentLength)
			if _, err := io.ReadFull(resp.Body, body); err != nil {
				t.Fatal(err)
			}
			if got, wantBody := string(body), want+" "+c.LocalAddr().String(); got != wantBody {
				t.Errorf("%s request %d: back-end saw %q, want %q", name, i, got, wantBody)
			}
		}
	}
}
