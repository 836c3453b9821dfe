// Eventually: poll a condition until it holds or a generous bound passes.

package testenv

import (
	"testing"
	"time"
)

// Eventually polls cond every 10 ms until it holds, failing tb after 10 s.
func Eventually(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
