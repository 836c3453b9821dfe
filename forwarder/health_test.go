// splicer_upstream_healthy follows an http-reverse pool's health checks: a live server 1, a dead one 0.

package forwarder_test

import (
	"fmt"
	"net"
	"testing"

	"github.com/splicer/splicer/forwarder"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/origin"
)

func TestUpstreamHealthGauge(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := origin.New(nil)
	t.Cleanup(func() { srv.Close() })
	if err := srv.Serve(origin.HTTP, ln); err != nil {
		t.Fatal(err)
	}
	dead := freeAddr(t)
	cfg, err := config.Parse("test.yaml", []byte(fmt.Sprintf(`
listeners:
  - name: rev
    listen: '127.0.0.1:0'
    proxy: http-reverse
    pools: [{name: p, servers: ['%s', '%s'], health_check: {path: /health, interval: 100ms, timeout: 100ms}}]
    routes: [{pool: p}]
`, ln.Addr(), dead)))
	if err != nil {
		t.Fatal(err)
	}
	f, err := forwarder.New(cfg, forwarder.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Shutdown(canceledCtx()) })
	gauge := func(server string) float64 {
		families, _ := f.Metrics().Registry.Gather()
		for _, mf := range families {
			if mf.GetName() != "splicer_upstream_healthy" {
				continue
			}
			for _, m := range mf.GetMetric() {
				if labelsEqual(m.GetLabel(), map[string]string{"listener": "rev", "pool": "p", "server": server}) {
					return m.GetGauge().GetValue()
				}
			}
		}
		return -1
	}
	testenv.Eventually(t, "the dead server marked unhealthy and the live one healthy", func() bool {
		return gauge(dead) == 0 && gauge(ln.Addr().String()) == 1
	})
}
