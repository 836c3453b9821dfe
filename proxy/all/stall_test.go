// A peer that stalls in the middle of a body the proxy streams in control mode (chunked) is cut after idle_timeout, by every HTTP kind, instead of holding the pair.

package all_test

import (
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/splicer/splicer/forwarder/fwdtest"
	"github.com/splicer/splicer/internal/config"
)

func TestStalledChunkedBodyTimesOut(t *testing.T) {
	up := httpOrigin(t)
	cfg, err := config.Parse("test.yaml", []byte(fmt.Sprintf(`
listeners:
  - {name: http-forward, listen: '127.0.0.1:0', proxy: http-forward, idle_timeout: 300ms, destinations: {allow: ['127.0.0.1']}}
  - {name: http-reverse, listen: '127.0.0.1:0', proxy: http-reverse, idle_timeout: 300ms, pools: [{name: p, servers: ['%[1]s']}], routes: [{pool: p}]}
  - {name: filter, listen: '127.0.0.1:0', proxy: filter, idle_timeout: 300ms, upstream: ['%[1]s']}
`, up)))
	if err != nil {
		t.Fatal(err)
	}
	f := fwdtest.Start(t, cfg.Listeners...)
	for _, l := range cfg.Listeners {
		t.Run(l.Name, func(t *testing.T) {
			c, err := net.Dial("tcp", f.Addr(l.Name).String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			target := "/obj/10"
			if l.Proxy == "http-forward" {
				target = "http://" + up + target
			}
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
