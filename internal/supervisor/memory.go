// The memory.limit key: the collector's soft memory limit (GOMEMLIMIT), set at start and by each reload.

package supervisor

import (
	"log/slog"
	"math"
	"runtime/debug"

	"github.com/splicer/splicer/internal/config"
)

// startLimit is the soft memory limit the process started with: the
// GOMEMLIMIT environment variable's, or none (math.MaxInt64). A negative
// argument only reads it.
var startLimit = debug.SetMemoryLimit(-1)

// applyMemoryLimit sets the soft memory limit to limit, or with limit 0
// to what the process started with, and returns the limit in force (0:
// none) and where it came from.
func applyMemoryLimit(limit config.Size) (now int64, from string) {
	switch {
	case limit > 0:
		debug.SetMemoryLimit(int64(limit))
		from = "memory.limit"
	case startLimit != math.MaxInt64:
		debug.SetMemoryLimit(startLimit)
		from = "GOMEMLIMIT"
	default:
		debug.SetMemoryLimit(math.MaxInt64)
		return 0, "none"
	}
	return debug.SetMemoryLimit(-1), from
}

// logMemoryLimit applies limit and logs the result when there is one.
func logMemoryLimit(log *slog.Logger, limit config.Size) {
	if now, from := applyMemoryLimit(limit); now > 0 {
		log.Info("memory limit", "bytes", now, "from", from)
	}
}
