// Package metrics holds splicer's Prometheus metrics: connections, bytes, splice transitions, fallbacks and HTTP request durations.
package metrics

import (
	"regexp"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/splicer/splicer/internal/buildinfo"
)

// Metrics are the forwarder's counters, registered on their own registry so
// tests and several forwarders in one process do not collide.
type Metrics struct {
	Registry *prometheus.Registry

	Accepted  *prometheus.CounterVec // listener
	Active    *prometheus.GaugeVec   // listener
	Closed    *prometheus.CounterVec // listener, reason
	Splices   *prometheus.CounterVec // engine, outcome
	Fallbacks *prometheus.CounterVec // from, to, reason
	Spliced   *prometheus.GaugeVec   // engine: pairs spliced right now
	// Promotions counts pairs engine auto moved from the engine they
	// started on to a deeper one once they proved long.
	Promotions *prometheus.CounterVec // listener, to

	ConnectSeconds *prometheus.HistogramVec // listener: upstream connect time
	SpliceSeconds  *prometheus.HistogramVec // engine: from Splice to forwarding in place
	// UnspliceSeconds: how long an engine took to give a pair back.
	UnspliceSeconds *prometheus.HistogramVec // engine
	PairSeconds     *prometheus.HistogramVec // listener: accept to close
	Draining        prometheus.Gauge         // 1 while shutting down
	// HTTPResponses counts HTTP answers by listener and status class.
	HTTPResponses *prometheus.CounterVec // listener, code (2xx...)
	// HTTPResponseBytes counts what HTTP answers sent clients by how the
	// bytes moved: copied, kernel (splice(2) in control mode), spliced
	// (an engine).
	HTTPResponseBytes *prometheus.CounterVec // listener, way
	// HTTPRequestSeconds is how long the HTTP kinds took to answer a
	// request, from its head to the answer's last byte.
	HTTPRequestSeconds *prometheus.HistogramVec // listener
	// DestinationsDenied counts dials the destination rules refused.
	DestinationsDenied *prometheus.CounterVec // listener

	registered []prometheus.Collector
}

// Register registers collectors on the registry and remembers them for Names.
func (m *Metrics) Register(cs ...prometheus.Collector) {
	m.Registry.MustRegister(cs...)
	m.registered = append(m.registered, cs...)
}

var fqNameRE = regexp.MustCompile(`fqName: "([^"]+)"`)

// Names lists every metric name the registered collectors can export,
// whether or not a series exists yet (dashboards and alerts are checked
// against it).
func (m *Metrics) Names() []string { return collectorNames(m.registered) }

// collectorNames lists the metric names collectors describe.
func collectorNames(cs []prometheus.Collector) []string {
	ch := make(chan *prometheus.Desc)
	go func() {
		for _, c := range cs {
			c.Describe(ch)
		}
		close(ch)
	}()
	var names []string
	for d := range ch {
		if g := fqNameRE.FindStringSubmatch(d.String()); g != nil {
			names = append(names, g[1])
		}
	}
	return names
}

// BytesName is the live byte counter's name; the forwarder exports it
// (see forwarder.byteCollector), counting open pairs as they run.
const BytesName = "splicer_bytes_total"

// The histograms' bucket bounds are written out in 1-2.5-5 steps so that
// every le label reads as a round number (0.0025, not 0.0026164428292736004).
var (
	// latencyBuckets spans 10 µs (an ip splice) to 10 s (a slow connect).
	latencyBuckets = []float64{
		0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005,
		0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
		0.1, 0.25, 0.5, 1, 2.5, 5, 10,
	}
	// requestBuckets spans 1 ms (a cached answer) to 2 min (a long download).
	requestBuckets = []float64{
		0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
		1, 2.5, 5, 10, 30, 60, 120,
	}
	// pairBuckets spans 1 ms (a refused pair) to a day (a tunnel kept open).
	pairBuckets = []float64{
		0.001, 0.01, 0.1, 0.5, 1, 5, 10, 30, 60,
		300, 900, 1800, 3600, 10800, 43200, 86400,
	}
)

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
			Help: "Pairs closed, by listener and reason (eof, reset, peer_timeout, idle, client_timeout, shutdown, max_connections, client_left, upstream_refused, upstream_unreachable, upstream_timeout, bad_request, proxy_error, error; a tcp listener with tls_routes: bad_hello, hello_too_large, hello_timeout, no_route).",
		}, []string{"listener", "reason"}),
		Splices: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "splicer_splice_transitions_total",
			Help: "Splices by engine and outcome: how each ended (eof, limit, data, reset, idle, cancel, error, timer, promote) or fallback.",
		}, []string{"engine", "outcome"}),
		Fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "splicer_fallbacks_total",
			Help: "Pairs handed to a shallower engine, by the engine that declined, the one that took over and why.",
		}, []string{"from", "to", "reason"}),
		Promotions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "splicer_promotions_total",
			Help: "Pairs engine auto moved from the engine they started on (copy) to a deeper one once they moved promote.after_bytes or lived promote.after, by listener and the engine that took them (ip; another if ip declined).",
		}, []string{"listener", "to"}),
		Spliced: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "splicer_pairs_spliced",
			Help: "Pairs in forwarding mode now, by engine.",
		}, []string{"engine"}),
		ConnectSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "splicer_upstream_connect_seconds",
			Help:    "Time to connect to an upstream, successful or not, by listener.",
			Buckets: latencyBuckets,
		}, []string{"listener"}),
		SpliceSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "splicer_splice_seconds",
			Help:    "Time from the proxy asking for a splice to forwarding being in place, by engine.",
			Buckets: latencyBuckets,
		}, []string{"engine"}),
		UnspliceSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "splicer_unsplice_seconds",
			Help:    "Time an engine took to give a spliced pair back in control mode (ip: sockets rebuilt), by engine.",
			Buckets: latencyBuckets,
		}, []string{"engine"}),
		PairSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "splicer_pair_duration_seconds",
			Help:    "Life of a pair from accept to close, by listener.",
			Buckets: pairBuckets,
		}, []string{"listener"}),
		HTTPResponses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "splicer_http_responses_total",
			Help: "Requests answered by the HTTP kinds (http-forward, http-reverse), by listener and status class (1xx..5xx), the proxy's own refusals included.",
		}, []string{"listener", "code"}),
		HTTPResponseBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "splicer_http_response_bytes_total",
			Help: "Bytes of the answers the HTTP kinds sent clients, heads included, by listener and way: copied (through the proxy's memory), kernel (splice(2) in control mode, no engine) or spliced (by the listener's engine).",
		}, []string{"listener", "way"}),
		HTTPRequestSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "splicer_http_request_duration_seconds",
			Help:    "Time the HTTP kinds (http-forward, http-reverse) took to answer a request, from its head to the end of its answer, by listener; the proxy's own refusals included.",
			Buckets: requestBuckets,
		}, []string{"listener"}),
		DestinationsDenied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "splicer_destinations_denied_total",
			Help: "Connections a client asked for (http-forward, socks5) that the destination rules refused: loopback, metadata, the forwarder itself, deny rules.",
		}, []string{"listener"}),
		Draining: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "splicer_draining",
			Help: "1 while the forwarder stops accepting and lets open pairs finish (shutdown or upgrade), else 0.",
		}),
	}
	bi := buildinfo.Get()
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "splicer_build_info",
		Help:        "Always 1; the labels say which splicer runs.",
		ConstLabels: prometheus.Labels{"version": bi.Version, "revision": bi.Revision, "goversion": bi.GoVersion},
	})
	build.Set(1)
	m.Register(m.Accepted, m.Active, m.Closed, m.Splices, m.Fallbacks, m.Promotions, m.Spliced,
		m.ConnectSeconds, m.SpliceSeconds, m.UnspliceSeconds, m.PairSeconds, m.Draining, m.DestinationsDenied, m.HTTPResponses, m.HTTPResponseBytes, m.HTTPRequestSeconds, build,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
