// Tests of Now: the program's clock read without a system call.

package datapath

import (
	"testing"
	"time"
)

// TestNowIsClockMonotonic: Now lies between two CLOCK_MONOTONIC readings
// around it (within a microsecond: its base is read around time.Now).
func TestNowIsClockMonotonic(t *testing.T) {
	for range 1000 {
		before := clockMonotonic()
		n := Now()
		after := clockMonotonic()
		if n < before-time.Microsecond || n > after+time.Microsecond {
			t.Fatalf("Now %v outside [%v, %v]", n, before, after)
		}
	}
}
