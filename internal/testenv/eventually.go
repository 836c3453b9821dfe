// Eventually: poll a condition until it holds or a generous bound passes.

package testenv

import (
	"testing"
	"time"
)

// Eventually polls cond every 10 ms until it holds, failing tb after Wait.
func Eventually(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	EventuallyShowing(tb, what, cond, nil)
}

// EventuallyShowing is Eventually that, failing, adds what detail returns
// then: the state that never came right (the flows, a metric's value).
func EventuallyShowing(tb testing.TB, what string, cond func() bool, detail func() string) {
	tb.Helper()
	deadline := time.Now().Add(Wait)
	for !cond() {
		if time.Now().After(deadline) {
			if detail != nil {
				tb.Fatalf("timed out waiting for %s: %s", what, detail())
			}
			tb.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
