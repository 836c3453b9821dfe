// Package metrics holds splicer's Prometheus metrics: connections, bytes, splice transitions and fallbacks.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics are the forwarder's counters, registered on their own registry so
// tests and several forwarders in one process do not collide.
type Metrics struct {
	Registry *prometheus.Registry

	Accepted  *prometheus.CounterVec // listener
	Active    *prometheus.GaugeVec   // listener
	Closed    *prometheus.CounterVec // listener, reason
	Bytes     *prometheus.CounterVec // listener, direction
	Splices   *prometheus.CounterVec // engine, outcome
	Fallbacks *prometheus.CounterVec // from, to, reason
	Spliced   *prometheus.GaugeVec   // engine: pairs spliced right now
}

// New creates and registers the metrics, plus Go runtime and process collectors.
func New() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		Accepted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "splicer_connections_accepted_total",
			Help: "Client connections accepted, by listener.",
		}, []string{"listener"}),
		Active: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "splicer_connections_active",
			Help: "Pairs open now, by listener.",
		}, []string{"listener"}),
		Closed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "splicer_connections_closed_total",
			Help: "Pairs closed, by listener and reason (eof, reset, idle, shutdown, max_connections, upstream_refused, upstream_unreachable, upstream_timeout, bad_request, proxy_error, idle, error).",
		}, []string{"listener", "reason"}),
		Bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "splicer_bytes_total",
			Help: "Bytes forwarded, by listener and direction (up: client to upstream, down: upstream to client), counted when a pair closes.",
		}, []string{"listener", "direction"}),
		Splices: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "splicer_splice_transitions_total",
			Help: "Splices by engine and outcome: how each ended (eof, limit, data, reset, idle, cancel, error, timer) or fallback.",
		}, []string{"engine", "outcome"}),
		Fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "splicer_fallbacks_total",
			Help: "Pairs handed to a shallower engine, by the engine that declined, the one that took over and why.",
		}, []string{"from", "to", "reason"}),
		Spliced: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "splicer_pairs_spliced",
			Help: "Pairs in forwarding mode now, by engine.",
		}, []string{"engine"}),
	}
	m.Registry.MustRegister(m.Accepted, m.Active, m.Closed, m.Bytes, m.Splices, m.Fallbacks, m.Spliced,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
