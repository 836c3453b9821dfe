// The state of every back-end server of the running listeners, read when asked: splicer_upstream_healthy, splicer_upstream_skipped and splicer_upstream_failures_total, and GET /upstreams.

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
	failuresDesc = prometheus.NewDesc("splicer_upstream_failures_total",
		"Failures of the back-end server that max_fails counts (connects that failed, and for http-reverse requests it did not answer), by listener, pool and server, since the listener was set up (a reload that changes it starts afresh).",
		[]string{"listener", "pool", "server"}, nil)
)

// healthCollector asks the current listeners' proxies for their pools.
type healthCollector struct{ f *Forwarder }

func (c healthCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- healthDesc
	ch <- skippedDesc
	ch <- failuresDesc
}

func (c healthCollector) Collect(ch chan<- prometheus.Metric) {
	for _, u := range c.f.Upstreams() {
		ch <- prometheus.MustNewConstMetric(healthDesc, prometheus.GaugeValue, gauge(u.Healthy), u.Listener, u.Pool, u.Server)
		ch <- prometheus.MustNewConstMetric(skippedDesc, prometheus.GaugeValue, gauge(u.Skipped), u.Listener, u.Pool, u.Server)
		ch <- prometheus.MustNewConstMetric(failuresDesc, prometheus.CounterValue, float64(u.Failures), u.Listener, u.Pool, u.Server)
	}
}

// UpstreamState is one back-end server of a running listener (an
// http-reverse pool's, a tcp or filter listener's upstream list, pool
// "upstream"): whether it passed its last health check (always, without
// checks), is skipped for failures now, and how many it had. GET
// /upstreams lists them.
type UpstreamState struct {
	Listener string `json:"listener"`
	proxy.ServerHealth
}

// Upstreams is every back-end server of the running listeners, in
// configuration order, a server named twice in one pool or list once.
func (f *Forwarder) Upstreams() []UpstreamState {
	f.mu.Lock()
	ls := append([]*listener(nil), f.listeners...)
	f.mu.Unlock()
	out := []UpstreamState{}
	for _, l := range ls {
		hr, ok := l.proxy.(proxy.HealthReporter)
		if !ok {
			continue
		}
		for _, h := range once(hr.Health()) {
			out = append(out, UpstreamState{Listener: l.cfg.Name, ServerHealth: h})
		}
	}
	return out
}

// gauge is 1 for true, 0 for false.
func gauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// once merges the entries of a server a pool or list names twice (for
// twice the share): a series exported twice would fail the whole scrape.
// The server is healthy if every entry is, skipped if any is, and its
// failures are theirs summed.
func once(hs []proxy.ServerHealth) []proxy.ServerHealth {
	type key struct{ pool, server string }
	at := make(map[key]int, len(hs))
	out := hs[:0]
	for _, h := range hs {
		k := key{h.Pool, h.Server}
		i, seen := at[k]
		if !seen {
			at[k] = len(out)
			out = append(out, h)
			continue
		}
		out[i].Healthy = out[i].Healthy && h.Healthy
		out[i].Skipped = out[i].Skipped || h.Skipped
		out[i].Failures += h.Failures
	}
	return out
}
