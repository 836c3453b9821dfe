// Periodic sampling in tests: run a function on a ticker in the background until the test says stop.

package testenv

import (
	"sync"
	"testing"
	"time"
)

// Every runs fn every period in a goroutine of its own until the returned
// stop is called (at the latest at cleanup); stop returns once fn has run
// for the last time, so what fn collected may be read then.
func Every(tb testing.TB, period time.Duration, fn func()) (stop func()) {
	tb.Helper()
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case <-tick.C:
			}
			fn()
		}
	})
	stop = sync.OnceFunc(func() {
		close(quit)
		wg.Wait()
	})
	tb.Cleanup(stop)
	return stop
}
