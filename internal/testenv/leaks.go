// Leaks: fail a test that leaves more goroutines running than it found; count the descriptors a process holds.

package testenv

import (
	"os"
	"runtime"
	"testing"
	"time"
)

// NoGoroutineLeaks fails tb if, after its cleanups, more goroutines run
// than before it. Call it first so its cleanup runs last.
func NoGoroutineLeaks(tb testing.TB) {
	tb.Helper()
	before := runtime.NumGoroutine()
	tb.Cleanup(func() {
		// Exiting goroutines take a moment to be reaped after a close.
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > before {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			tb.Errorf("%d goroutines before, %d after:\n%s", before, n, buf)
		}
	})
}

// OpenFDs counts this process's open descriptors.
func OpenFDs(tb testing.TB) int {
	tb.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		tb.Fatal(err)
	}
	return len(ents)
}
