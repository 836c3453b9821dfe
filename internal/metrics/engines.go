// Exporting the engines' own counters (BPF redirects, drops by reason, bytes moved) at scrape time, events and bytes in families of their own.

package metrics

import (
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	engineEventsDesc = prometheus.NewDesc("splicer_engine_events_total",
		"Engine-internal events by engine and event: BPF redirects, give-backs, drops by reason. Bytes are in splicer_engine_bytes_total.",
		[]string{"engine", "event"}, nil)
	engineBytesDesc = prometheus.NewDesc("splicer_engine_bytes_total",
		"Bytes an engine moved by engine and kind: sockmap's kernel (redirected by its BPF program) and user (moved in user space), ip's drained (bytes the forwarder held when the pair was spliced).",
		[]string{"engine", "kind"}, nil)
)

// Engine is what the metrics read of an engine: its name. An engine that
// also has Counters() map[string]uint64 (engine.Counters) has its counters
// exported, and one with ObserveUnsplice(func(time.Duration))
// (engine.UnspliceObserver) its unsplice times. Taking this much rather
// than engine.Engine keeps metrics a leaf package.
type Engine interface {
	Name() string
}

// counters and unspliceObserver are the optional parts of an Engine.
type (
	counters         interface{ Counters() map[string]uint64 }
	unspliceObserver interface {
		ObserveUnsplice(fn func(time.Duration))
	}
)

// bytesSuffix marks an engine counter that counts bytes, not events
// (engine.Counters): it is exported in splicer_engine_bytes_total, kind
// being the name without the suffix.
const bytesSuffix = "_bytes"

// engineCollector reads every engine's counters when scraped.
type engineCollector struct{ engines []Engine }

func (c engineCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- engineEventsDesc
	ch <- engineBytesDesc
}

func (c engineCollector) Collect(ch chan<- prometheus.Metric) {
	for _, e := range c.engines {
		ec, ok := e.(counters)
		if !ok {
			continue
		}
		for name, v := range ec.Counters() {
			if kind, isBytes := strings.CutSuffix(name, bytesSuffix); isBytes {
				ch <- prometheus.MustNewConstMetric(engineBytesDesc, prometheus.CounterValue, float64(v), e.Name(), kind)
				continue
			}
			ch <- prometheus.MustNewConstMetric(engineEventsDesc, prometheus.CounterValue, float64(v), e.Name(), name)
		}
	}
}

// RegisterEngines exports the counters of the engines that keep their own,
// and the unsplice times of those that report them.
func (m *Metrics) RegisterEngines(engines []Engine) {
	m.Register(engineCollector{engines: engines})
	for _, e := range engines {
		if o, ok := e.(unspliceObserver); ok {
			h := m.UnspliceSeconds.WithLabelValues(e.Name())
			o.ObserveUnsplice(func(d time.Duration) { h.Observe(d.Seconds()) })
		}
	}
}
