// splicer_upstream_healthy and splicer_upstream_skipped: the health-check state of every back-end server of the running listeners, and whether failures have it skipped, read at scrape time.

package forwarder

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/splicer/splicer/proxy"
)

var (
	healthDesc = prometheus.NewDesc("splicer_upstream_healthy",
		"1 if the back-end server passed its last health check (or has none), else 0, by listener, pool and server (http-reverse's pools; tcp's and filter's upstream lists as pool \"upstream\").",
		[]string{"listener", "pool", "server"}, nil)
	skippedDesc = prometheus.NewDesc("splicer_upstream_skipped",
		"1 while the back-end server is skipped for failures (max_fails within fail_timeout: connects that failed, and for http-reverse requests it did not answer), else 0, by listener, pool and server.",
		[]string{"listener", "pool", "server"}, nil)
)

// healthCollector asks the current listeners' proxies for their pools.
type healthCollector struct{ f *Forwarder }

func (c healthCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- healthDesc
	ch <- skippedDesc
}

func (c healthCollector) Collect(ch chan<- prometheus.Metric) {
	c.f.mu.Lock()
	ls := append([]*listener(nil), c.f.listeners...)
	c.f.mu.Unlock()
	for _, l := range ls {
		hr, ok := l.proxy.(proxy.HealthReporter)
		if !ok {
			continue
		}
		for _, h := range once(hr.Health()) {
			ch <- prometheus.MustNewConstMetric(healthDesc, prometheus.GaugeValue, gauge(h.Healthy), l.cfg.Name, h.Pool, h.Server)
			ch <- prometheus.MustNewConstMetric(skippedDesc, prometheus.GaugeValue, gauge(h.Skipped), l.cfg.Name, h.Pool, h.Server)
		}
	}
}

// gauge is 1 for true, 0 for false.
func gauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// once keeps the first of the servers a pool or list names twice (a
// server listed twice for twice the share): a series exported twice would
// fail the whole scrape.
func once(hs []proxy.ServerHealth) []proxy.ServerHealth {
	type key struct{ pool, server string }
	seen := make(map[key]bool, len(hs))
	out := hs[:0]
	for _, h := range hs {
		if k := (key{h.Pool, h.Server}); !seen[k] {
			seen[k] = true
			out = append(out, h)
		}
	}
	return out
}
