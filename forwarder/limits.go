// The running listeners' connection limits, read when scraped (splicer_connections_limit), so an alert can compare the pairs open with the limit that refuses the next.

package forwarder

import "github.com/prometheus/client_golang/prometheus"

var connLimitDesc = prometheus.NewDesc("splicer_connections_limit",
	"The listener's max_connections: past it, new connections are closed at once (reason max_connections); listeners without a limit have no series.",
	[]string{"listener"}, nil)

// limitCollector exports the limits of the listeners running now, so a
// reload that changes one shows at the next scrape.
type limitCollector struct{ f *Forwarder }

func (c limitCollector) Describe(ch chan<- *prometheus.Desc) { ch <- connLimitDesc }

func (c limitCollector) Collect(ch chan<- prometheus.Metric) {
	for _, l := range c.f.running() {
		if n := l.cfg.MaxConnections; n > 0 {
			ch <- prometheus.MustNewConstMetric(connLimitDesc, prometheus.GaugeValue, float64(n), l.cfg.Name)
		}
	}
}
