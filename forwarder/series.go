// series: the metric children a pair touches, by listener and by engine, looked up once and kept.

package forwarder

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/splicer/splicer/internal/metrics"
)

// series holds the children of the metrics every pair updates, so that a
// new connection pays no label lookup: by listener name, and by engine
// name, the keys of which outlive a reload's listeners.
type series struct {
	accepted       *metrics.Series[prometheus.Counter]
	active         *metrics.Series[prometheus.Gauge]
	pairSeconds    *metrics.Series[prometheus.Observer]
	connectSeconds *metrics.Series[prometheus.Observer]
	// closed is by listener, then reason.
	closed        *metrics.Series[*metrics.Series[prometheus.Counter]]
	spliced       *metrics.Series[prometheus.Gauge]
	spliceSeconds *metrics.Series[prometheus.Observer]
	// splices is by engine, then outcome.
	splices *metrics.Series[*metrics.Series[prometheus.Counter]]
}

func newSeries(m *metrics.Metrics) *series {
	return &series{
		accepted:       metrics.NewSeries(func(l string) prometheus.Counter { return m.Accepted.WithLabelValues(l) }),
		active:         metrics.NewSeries(func(l string) prometheus.Gauge { return m.Active.WithLabelValues(l) }),
		pairSeconds:    metrics.NewSeries(func(l string) prometheus.Observer { return m.PairSeconds.WithLabelValues(l) }),
		connectSeconds: metrics.NewSeries(func(l string) prometheus.Observer { return m.ConnectSeconds.WithLabelValues(l) }),
		closed:         bySecond(m.Closed),
		spliced:        metrics.NewSeries(func(e string) prometheus.Gauge { return m.Spliced.WithLabelValues(e) }),
		spliceSeconds:  metrics.NewSeries(func(e string) prometheus.Observer { return m.SpliceSeconds.WithLabelValues(e) }),
		splices:        bySecond(m.Splices),
	}
}

// bySecond keeps vec's counters by their first label's value, then their
// second's.
func bySecond(vec *prometheus.CounterVec) *metrics.Series[*metrics.Series[prometheus.Counter]] {
	return metrics.NewSeries(func(first string) *metrics.Series[prometheus.Counter] {
		return metrics.NewSeries(func(second string) prometheus.Counter { return vec.WithLabelValues(first, second) })
	})
}
