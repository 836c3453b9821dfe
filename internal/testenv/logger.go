// Logs in tests: a buffer safe for concurrent writers, and a component's debug log kept quiet unless the test fails, when it is printed to explain the failure.

package testenv

import (
	"bytes"
	"log/slog"
	"sync"
	"testing"
)

// Logger returns a debug-level logger whose lines tb prints only if it
// fails, so a flaky failure in CI comes with the component's own account.
func Logger(tb testing.TB) *slog.Logger {
	tb.Helper()
	w := &Buffer{}
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Logf("debug log:\n%s", w.String())
		}
	})
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// Buffer collects a log or a process's output while a test reads it.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
