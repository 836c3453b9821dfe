// The state of every back-end server of the running listeners, read when asked (splicer_upstream_healthy, _skipped, _drained, _active, _failures_total, _resolved_addresses, _resolve_failures_total, and GET /upstreams), and draining one at run time.

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
		"1 while the back-end server is skipped for failures (max_fails within fail_timeout: connects that failed, and for http-reverse and filter requests it did not answer), else 0, by listener, pool and server.",
		[]string{"listener", "pool", "server"}, nil)
	drainedDesc = prometheus.NewDesc("splicer_upstream_drained",
		"1 while an operator has the back-end server drained (POST /upstreams/drain): it gets no new connections or requests, else 0, by listener, pool and server.",
		[]string{"listener", "pool", "server"}, nil)
	activeDesc = prometheus.NewDesc("splicer_upstream_active",
		"Connections the back-end server carries now (tcp, filter: client connections; http-reverse: requests in flight on upstream connections), which max_conns bounds, by listener, pool and server.",
		[]string{"listener", "pool", "server"}, nil)
	queuedDesc = prometheus.NewDesc("splicer_upstream_queued",
		"Clients (tcp, filter) or requests (http-reverse) waiting now for a place in the pool, every usable server of which is full (max_conns), up to queue_timeout, by listener and pool.",
		[]string{"listener", "pool"}, nil)
	failuresDesc = prometheus.NewDesc("splicer_upstream_failures_total",
		"Failures of the back-end server that max_fails counts (connects that failed, and for http-reverse and filter requests it did not answer), by listener, pool and server, since the process started (a reload carries the count on).",
		[]string{"listener", "pool", "server"}, nil)
	resolvedDesc = prometheus.NewDesc("splicer_upstream_resolved_addresses",
		"Addresses a server given by name with resolve (or srv) stands for now, each a server of its own (the server label of the other splicer_upstream_ series), by listener, pool and name; a failed lookup keeps the last ones.",
		[]string{"listener", "pool", "name"}, nil)
	resolveFailuresDesc = prometheus.NewDesc("splicer_upstream_resolve_failures_total",
		"Lookups of a server given by name with resolve (or srv) that failed or found no address, by listener, pool and name, since its listener last started or reloaded.",
		[]string{"listener", "pool", "name"}, nil)
)

// healthCollector asks the current listeners' proxies for their pools.
type healthCollector struct{ f *Forwarder }

func (c healthCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- healthDesc
	ch <- skippedDesc
	ch <- drainedDesc
	ch <- activeDesc
	ch <- failuresDesc
	ch <- queuedDesc
	ch <- resolvedDesc
	ch <- resolveFailuresDesc
}

func (c healthCollector) Collect(ch chan<- prometheus.Metric) {
	for _, u := range c.f.Upstreams() {
		ch <- prometheus.MustNewConstMetric(healthDesc, prometheus.GaugeValue, gauge(u.Healthy), u.Listener, u.Pool, u.Server)
		ch <- prometheus.MustNewConstMetric(skippedDesc, prometheus.GaugeValue, gauge(u.Skipped), u.Listener, u.Pool, u.Server)
		ch <- prometheus.MustNewConstMetric(drainedDesc, prometheus.GaugeValue, gauge(u.Drained), u.Listener, u.Pool, u.Server)
		ch <- prometheus.MustNewConstMetric(activeDesc, prometheus.GaugeValue, float64(u.Active), u.Listener, u.Pool, u.Server)
		ch <- prometheus.MustNewConstMetric(failuresDesc, prometheus.CounterValue, float64(u.Failures), u.Listener, u.Pool, u.Server)
	}
	for _, l := range c.f.running() {
		for _, pl := range pools(l.proxy) {
			if pl.QueueTimeout > 0 {
				ch <- prometheus.MustNewConstMetric(queuedDesc, prometheus.GaugeValue, float64(pl.Waiting()), l.cfg.Name, pl.Name)
			}
			for _, r := range onceResolved(pl.Resolutions()) {
				ch <- prometheus.MustNewConstMetric(resolvedDesc, prometheus.GaugeValue, float64(len(r.Addresses)), l.cfg.Name, pl.Name, r.Name)
				ch <- prometheus.MustNewConstMetric(resolveFailuresDesc, prometheus.CounterValue, float64(r.Failures), l.cfg.Name, pl.Name, r.Name)
			}
		}
	}
}

// UpstreamState is one back-end server of a running listener (an
// http-reverse pool's, a tcp or filter listener's upstream list, pool
// "upstream"): whether it passed its last health check (always, without
// checks), is skipped for failures now, how many failures it had, whether
// it is drained or a backup, and the connections it carries. GET
// /upstreams lists them.
type UpstreamState struct {
	Listener string `json:"listener"`
	proxy.ServerHealth
}

// Upstreams is every back-end server of the running listeners, in
// configuration order, a server named twice in one pool or list once.
func (f *Forwarder) Upstreams() []UpstreamState {
	out := []UpstreamState{}
	for _, l := range f.running() {
		for _, pl := range pools(l.proxy) {
			for _, h := range once(pl.Health()) {
				out = append(out, UpstreamState{Listener: l.cfg.Name, ServerHealth: h})
			}
		}
	}
	return out
}

// pools are p's pools of back-end servers, none for a proxy without
// (proxy.PoolOwner).
func pools(p proxy.Proxy) []*proxy.Pool {
	if po, ok := p.(proxy.PoolOwner); ok {
		return po.Pools()
	}
	return nil
}

// running is the current listeners.
func (f *Forwarder) running() []*listener {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*listener(nil), f.listeners...)
}

// DrainUpstream drains (on) or readies (!on) the back-end server at
// address server in every running listener and pool that names it, or
// only in listener and pool where they are not empty (Pool.Drain). It
// returns the servers' new state, none when nothing matched.
func (f *Forwarder) DrainUpstream(listener, pool, server string, on bool) []UpstreamState {
	out := []UpstreamState{}
	for _, l := range f.running() {
		if listener != "" && l.cfg.Name != listener {
			continue
		}
		for _, pl := range pools(l.proxy) {
			if (pool != "" && pl.Name != pool) || pl.Drain(server, on) == 0 {
				continue
			}
			msg := "back-end server drained by an operator"
			if !on {
				msg = "back-end server ready again"
			}
			f.log.Info(msg, "listener", l.cfg.Name, "pool", pl.Name, "server", server)
			for _, h := range once(pl.Health()) {
				if h.Server == server {
					out = append(out, UpstreamState{Listener: l.cfg.Name, ServerHealth: h})
				}
			}
		}
	}
	return out
}

// inheritUpstreams carries the servers' drained state and failures from
// a listener's old proxy to the one a reload replaces it with, pool by
// pool of the same name (Pool.Inherit).
func inheritUpstreams(from, to proxy.Proxy) {
	old := map[string]*proxy.Pool{}
	for _, pl := range pools(from) {
		old[pl.Name] = pl
	}
	for _, pl := range pools(to) {
		if o := old[pl.Name]; o != nil {
			pl.Inherit(o)
		}
	}
}

// onceResolved keeps the first of the names a pool gives twice: a series
// exported twice would fail the whole scrape.
func onceResolved(rs []proxy.Resolution) []proxy.Resolution {
	seen := map[string]bool{}
	out := rs[:0]
	for _, r := range rs {
		if !seen[r.Name] {
			seen[r.Name] = true
			out = append(out, r)
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
// The server is healthy if every entry is, skipped or drained if any is,
// a backup if every entry is, and its failures and connections are
// theirs summed.
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
		out[i].Drained = out[i].Drained || h.Drained
		out[i].Backup = out[i].Backup && h.Backup
		out[i].Failures += h.Failures
		out[i].Active += h.Active
	}
	return out
}
