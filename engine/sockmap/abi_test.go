// Tests of the interface Go shares with bpf/splice.c: every counter the program keeps is reported, and the maps are sized by the generated enum.

package sockmap

import "testing"

// TestCounterFields: each index of enum counter has a Stats field, so a
// counter added to the C without one fails here.
func TestCounterFields(t *testing.T) {
	for i, f := range counterFields {
		if f == nil {
			t.Errorf("counter %d of enum counter has no Stats field", i)
		}
	}
	spec, err := loadSplice()
	if err != nil {
		t.Fatal(err)
	}
	if got := spec.Maps[spliceMapCounters].MaxEntries; got != uint32(counterMax) {
		t.Errorf("the counters map has %d entries, enum counter %d", got, counterMax)
	}
}
