// Tests of Now: the program's clock read without a system call.

package datapath

import (
	"testing"
	"time"
)

// TestNowIsClockMonotonic: Now lies between two CLOCK_MONOTONIC readings
// around it, give or take its base's own error (the base is read between
// two such readings) and a microsecond.
func TestNowIsClockMonotonic(t *testing.T) {
	slack := monoBase.err + time.Microsecond
	for range 1000 {
		before := clockMonotonic()
		n := Now()
		after := clockMonotonic()
		if n < before-slack || n > after+slack {
			t.Fatalf("Now %v outside [%v, %v] by more than %v", n, before, after, slack)
		}
	}
}
