// Tests of the tally of the engine that carried auto's pairs at the end of a run: pairs promoted count for the engine they went to, the rest for copy.

package bench

import (
	"strings"
	"testing"
)

// TestEndEngines: of 8 pairs auto-sink accepted during the run, 6 were
// promoted to ip; another listener's pairs and counters that did not move
// do not count.
func TestEndEngines(t *testing.T) {
	before := map[string]float64{
		`splicer_connections_accepted_total{listener="auto-sink"}`: 10,
		`splicer_promotions_total{listener="auto-sink",to="ip"}`:   4,
		`splicer_connections_accepted_total{listener="copy-sink"}`: 3,
	}
	after := map[string]float64{
		`splicer_connections_accepted_total{listener="auto-sink"}`: 18,
		`splicer_promotions_total{listener="auto-sink",to="ip"}`:   10,
		`splicer_connections_accepted_total{listener="copy-sink"}`: 9,
		`splicer_promotions_total{listener="auto-echo",to="ip"}`:   2,
	}
	got := endEngines("auto-sink", before, after)
	if len(got) != 2 || got["ip"] != 6 || got["copy"] != 2 {
		t.Errorf("endEngines = %v, want ip 6, copy 2", got)
	}
}

// TestCarriersNote: the note names each row's carriers over its runs,
// and says which pairs were not promoted.
func TestCarriersNote(t *testing.T) {
	c := newCarriers()
	if n := c.note("auto"); n != "" {
		t.Errorf("note with no run tallied = %q, want none", n)
	}
	c.add("gbps_1conn", map[string]float64{"ip": 1})
	c.add("gbps_1conn", map[string]float64{"ip": 1})
	c.add("gbps_8conn", map[string]float64{"ip": 6, "copy": 2})
	n := c.note("auto")
	for _, want := range []string{"auto: ", "gbps_1conn: ip 2/2 pairs", "gbps_8conn: ip 6, copy 2 (not promoted) of 8 pairs"} {
		if !strings.Contains(n, want) {
			t.Errorf("note %q does not say %q", n, want)
		}
	}
}
