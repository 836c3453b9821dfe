// Package deploytest checks the queries of the files in deploy (Grafana dashboard, Prometheus alerts) against the metric names splicer exports, so a renamed metric fails a test rather than an operator's panel or alert.
package deploytest

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/splicer/splicer/forwarder"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/metrics"
)

// Exported lists what a running forwarder, or a master of workers, can
// export, whether or not a series exists yet.
func Exported(tb testing.TB) []string {
	tb.Helper()
	cfg := config.Default()
	f, err := forwarder.New(&cfg, forwarder.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	// With workers, a master exports its own beside its workers'.
	return append(f.Metrics().Names(), metrics.NewMaster(2).Names()...)
}

var metricRE = regexp.MustCompile(`\bsplicer_[a-z0-9_]+`)

// Check returns the splicer metrics query uses and those of them that
// exported lacks; a histogram's _bucket, _count and _sum series count as
// the histogram.
func Check(exported []string, query string) (used, unknown []string) {
	for _, m := range metricRE.FindAllString(query, -1) {
		used = append(used, m)
		base := m
		for _, suffix := range []string{"_bucket", "_count", "_sum"} {
			if trimmed, ok := strings.CutSuffix(m, suffix); ok && slices.Contains(exported, trimmed) {
				base = trimmed
			}
		}
		if !slices.Contains(exported, base) {
			unknown = append(unknown, m)
		}
	}
	return used, unknown
}
