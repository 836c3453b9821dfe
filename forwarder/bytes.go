// splicer_bytes_total read at scrape time: closed pairs' bytes plus what open pairs have moved so far, so a long transfer shows in rate().

package forwarder

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/internal/metrics"
)

// byteCollector exports the byte counter from the pair registry. Engines
// count a pair's bytes as they move them (the ip datapath's counts are
// read by the pair's follower), so the counter grows while pairs run
// rather than jumping when they close.
type byteCollector struct {
	flows *Flows
	desc  *prometheus.Desc

	mu sync.Mutex
	// last is what each series reported: an engine may correct a running
	// count downwards (ip recounts from sequence numbers at FIN), and a
	// counter must never go back.
	last map[[2]string]float64
}

func newByteCollector(flows *Flows) *byteCollector {
	return &byteCollector{flows: flows, last: map[[2]string]float64{},
		desc: prometheus.NewDesc(metrics.BytesName,
			"Bytes forwarded, by listener and direction (up: client to upstream, down: upstream to client), counted while pairs run.",
			[]string{"listener", "direction"}, nil)}
}

func (c *byteCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *byteCollector) Collect(ch chan<- prometheus.Metric) {
	totals := c.flows.byteTotals()
	c.mu.Lock()
	defer c.mu.Unlock()
	for l, t := range totals {
		for d, dir := range map[engine.Direction]string{engine.Up: "up", engine.Down: "down"} {
			key := [2]string{l, dir}
			v := max(float64(t[d]), c.last[key])
			c.last[key] = v
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, v, l, dir)
		}
	}
}
