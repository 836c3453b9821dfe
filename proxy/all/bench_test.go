// Go benchmark of the HTTP request path on loopback: GET of a 1 KiB object over one keep-alive connection through http-reverse (profile it with -cpuprofile).

package all_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"

	"github.com/splicer/splicer/forwarder/fwdtest"
	"github.com/splicer/splicer/internal/config"
)

func BenchmarkHTTPReverse1KiB(b *testing.B) {
	up := httpOrigin(b)
	cfg, err := config.Parse("test.yaml", []byte(fmt.Sprintf(`
listeners:
  - {name: rev, listen: '127.0.0.1:0', proxy: http-reverse, engine: pipe, pools: [{name: p, servers: ['%s']}], routes: [{pool: p}]}
`, up)))
	if err != nil {
		b.Fatal(err)
	}
	f := fwdtest.Start(b, cfg.Listeners...)
	c, err := net.Dial("tcp", f.Addr("rev").String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	req := []byte("GET /obj/1KiB HTTP/1.1\r\nHost: app.example\r\n\r\n")
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}
