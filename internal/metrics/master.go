// The metrics a master exports itself, beside the ones it gathers from its workers: how many workers it keeps, and how often it restarted one.

package metrics

import "github.com/prometheus/client_golang/prometheus"

// Master is a master process's own registry.
type Master struct {
	Registry *prometheus.Registry
	// Restarts counts workers the master restarted after they ended
	// unasked.
	Restarts   prometheus.Counter
	registered []prometheus.Collector
}

// NewMaster creates and registers the master's metrics for a master of
// workers processes.
func NewMaster(workers int) *Master {
	m := &Master{Registry: prometheus.NewRegistry()}
	m.Restarts = prometheus.NewCounter(prometheus.CounterOpts{Name: "splicer_worker_restarts_total",
		Help: "Worker processes the master restarted after they ended unasked."})
	m.registered = []prometheus.Collector{m.Restarts, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "splicer_workers",
		Help: "Worker processes the master keeps running (workers)."}, func() float64 { return float64(workers) })}
	m.Registry.MustRegister(m.registered...)
	return m
}

// Names lists the metric names the master exports itself.
func (m *Master) Names() []string { return collectorNames(m.registered) }
