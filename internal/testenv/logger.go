// Logger for tests: a component's debug log, kept quiet unless the test fails, when it is printed to explain the failure.

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
	w := &lockedBuffer{}
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Logf("debug log:\n%s", w.String())
		}
	})
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf.Len() > 1<<20 {
		return len(p), nil // keep the first MiB: the start of a failure
	}
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
