// Exporting the engines' own counters (BPF redirects, drops by reason) at scrape time.

package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/splicer/splicer/engine"
)

var engineEventsDesc = prometheus.NewDesc("splicer_engine_events_total",
	"Engine-internal counters by engine and event: BPF redirects, give-backs, drops by reason.",
	[]string{"engine", "event"}, nil)

// engineCollector reads every engine's counters when scraped.
type engineCollector struct{ engines []engine.Engine }

func (c engineCollector) Describe(ch chan<- *prometheus.Desc) { ch <- engineEventsDesc }

func (c engineCollector) Collect(ch chan<- prometheus.Metric) {
	for _, e := range c.engines {
		ec, ok := e.(engine.Counters)
		if !ok {
			continue
		}
		for event, v := range ec.Counters() {
			ch <- prometheus.MustNewConstMetric(engineEventsDesc, prometheus.CounterValue, float64(v), e.Name(), event)
		}
	}
}

// RegisterEngines exports the counters of the engines that keep their own.
func (m *Metrics) RegisterEngines(engines []engine.Engine) {
	m.Register(engineCollector{engines: engines})
	for _, e := range engines {
		if o, ok := e.(engine.UnspliceObserver); ok {
			h := m.UnspliceSeconds.WithLabelValues(e.Name())
			o.ObserveUnsplice(func(d time.Duration) { h.Observe(d.Seconds()) })
		}
	}
}
