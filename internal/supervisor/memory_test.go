// memory.limit: set as the soft memory limit, and given back to the process's own when the key goes.

package supervisor

import (
	"runtime/debug"
	"testing"
)

// TestApplyMemoryLimit: memory.limit becomes the collector's soft limit;
// 0 puts back what the process started with.
func TestApplyMemoryLimit(t *testing.T) {
	t.Cleanup(func() { debug.SetMemoryLimit(startLimit) })
	if now, from := applyMemoryLimit(64 << 20); now != 64<<20 || from != "memory.limit" || debug.SetMemoryLimit(-1) != 64<<20 {
		t.Errorf("memory.limit 64MiB: %d from %s, runtime's %d", now, from, debug.SetMemoryLimit(-1))
	}
	applyMemoryLimit(0)
	if got := debug.SetMemoryLimit(-1); got != startLimit {
		t.Errorf("memory.limit 0: runtime's limit %d, want the start's %d", got, startLimit)
	}
}
