// What the forwarder's tests, inside the package and out, read of its metrics.

package forwarder

import (
	"slices"

	dto "github.com/prometheus/client_model/go"
)

// CounterSum is the sum of f's counter name over its series whose label
// is value (every series when label is ""): a count over listeners,
// engines or reasons.
func CounterSum(f *Forwarder, name, label, value string) float64 {
	families, err := f.Metrics().Registry.Gather()
	if err != nil {
		panic(err) // the forwarder's own registry: a programming error
	}
	var sum float64
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label == "" || slices.ContainsFunc(m.GetLabel(), func(lp *dto.LabelPair) bool {
				return lp.GetName() == label && lp.GetValue() == value
			}) {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}
