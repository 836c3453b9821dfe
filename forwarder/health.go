// splicer_upstream_healthy: the health-check state of every back-end server of the running listeners' pools, read at scrape time.

package forwarder

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/splicer/splicer/proxy"
)

var healthDesc = prometheus.NewDesc("splicer_upstream_healthy",
	"1 if the back-end server passed its last health check (or has none), else 0, by listener, pool and server (http-reverse).",
	[]string{"listener", "pool", "server"}, nil)

// healthCollector asks the current listeners' proxies for their pools.
type healthCollector struct{ f *Forwarder }

func (c healthCollector) Describe(ch chan<- *prometheus.Desc) { ch <- healthDesc }

func (c healthCollector) Collect(ch chan<- prometheus.Metric) {
	c.f.mu.Lock()
	ls := append([]*listener(nil), c.f.listeners...)
	c.f.mu.Unlock()
	for _, l := range ls {
		hr, ok := l.proxy.(proxy.HealthReporter)
		if !ok {
			continue
		}
		for _, h := range hr.Health() {
			v := 0.0
			if h.Healthy {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(healthDesc, prometheus.GaugeValue, v, l.cfg.Name, h.Pool, h.Server)
		}
	}
}
