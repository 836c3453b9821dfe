// splicer_upstream_healthy follows an http-reverse pool's health checks: a live server 1, a dead one 0.

package forwarder_test

import (
	"fmt"
	"testing"

	"github.com/splicer/splicer/forwarder"
	"github.com/splicer/splicer/forwarder/fwdtest"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/testenv"
)

func TestUpstreamHealthGauge(t *testing.T) {
	live, dead := fwdtest.HTTPOrigin(t), testenv.FreeAddr(t)
	cfg, err := config.Parse("test.yaml", []byte(fmt.Sprintf(`
listeners:
  - name: rev
    listen: '127.0.0.1:0'
    proxy: http-reverse
    pools: [{name: p, servers: ['%s', '%s'], health_check: {path: /health, interval: 100ms, timeout: 100ms}}]
    routes: [{pool: p}]
`, live, dead)))
	if err != nil {
		t.Fatal(err)
	}
	f := fwdtest.StartConfig(t, cfg, forwarder.Options{})
	gauge := func(server string) float64 {
		if v, ok := fwdtest.Series(f, "splicer_upstream_healthy", "listener", "rev", "pool", "p", "server", server); ok {
			return v
		}
		return -1
	}
	testenv.Eventually(t, "the dead server marked unhealthy and the live one healthy", func() bool {
		return gauge(dead) == 0 && gauge(live) == 1
	})
}
