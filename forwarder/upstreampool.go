// splicer_upstream_pool_*: how often http-reverse requests found an idle upstream connection in the listener's pool, read at scrape time.

package forwarder

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/splicer/splicer/proxy"
)

var (
	poolTakesDesc = prometheus.NewDesc("splicer_upstream_pool_total",
		"Requests that needed a new upstream connection and took an idle one from the listener's pool (result hit) or dialled (miss), and pooled connections found closed by the server when taken (stale), by listener and server (http-reverse).",
		[]string{"listener", "server", "result"}, nil)
	poolIdleDesc = prometheus.NewDesc("splicer_upstream_pool_idle",
		"Idle upstream connections in the listener's pool now, by listener and server (http-reverse).",
		[]string{"listener", "server"}, nil)
)

// poolCollector asks the current listeners' proxies for their pools' counters.
type poolCollector struct{ f *Forwarder }

func (c poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- poolTakesDesc
	ch <- poolIdleDesc
}

func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	c.f.mu.Lock()
	ls := append([]*listener(nil), c.f.listeners...)
	c.f.mu.Unlock()
	for _, l := range ls {
		pr, ok := l.proxy.(proxy.PoolReporter)
		if !ok {
			continue
		}
		for _, st := range pr.UpstreamPool() {
			for result, n := range map[string]uint64{"hit": st.Hits, "miss": st.Misses, "stale": st.Stale} {
				ch <- prometheus.MustNewConstMetric(poolTakesDesc, prometheus.CounterValue, float64(n), l.cfg.Name, st.Server, result)
			}
			ch <- prometheus.MustNewConstMetric(poolIdleDesc, prometheus.GaugeValue, float64(st.Idle), l.cfg.Name, st.Server)
		}
	}
}
