// Tests of the grace periods by the softirq watch: splices end them without visiting every CPU, and the pairs forward intact.

package ip

import (
	"context"
	"testing"

	"github.com/splicer/splicer/engine"
)

// TestEngineGraceBySoftirqWatch: splicing idle pairs, the softirq watch
// ends the grace periods (a CPU stays busy past its bound only under a
// long NET_RX run, so most of them at least), and every pair forwards
// both ways.
func TestEngineGraceBySoftirqWatch(t *testing.T) {
	el := newEngineLab(t, Options{MaxPairs: 16})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const n = 8
	for range n {
		lp := el.pair(t, "")
		el.splice(t, ctx, lp, engine.Both(0))
		echoOnce(t, lp)
	}
	if el.e.devices.bh == nil {
		t.Fatal("the softirq watch did not load")
	}
	c := el.e.Counters()
	watched, visited := c["graces_watched"], c["graces_visited"]
	t.Logf("grace periods: %d by the softirq watch, %d by visits", watched, visited)
	if watched < n/2 || watched+visited < n {
		t.Errorf("grace periods: %d by the softirq watch and %d by visits for %d splices, want most by the watch", watched, visited, n)
	}
}
