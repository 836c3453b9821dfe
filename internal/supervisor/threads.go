// The threads key: how many threads run Go code at once (GOMAXPROCS), set at start and by each reload.

package supervisor

import (
	"log/slog"
	"os"
	"runtime"
	"strconv"
)

// applyThreads sets GOMAXPROCS to n, or with n 0 to what the process
// started with: the GOMAXPROCS environment variable if set, else Go's
// default (the CPUs the process may use, following its affinity and
// cgroup quota). It returns the setting now in force and where it came
// from.
func applyThreads(n int) (now int, from string) {
	switch env := os.Getenv("GOMAXPROCS"); {
	case n > 0:
		runtime.GOMAXPROCS(n)
		from = "threads"
	case env != "":
		if v, err := strconv.Atoi(env); err == nil && v > 0 {
			runtime.GOMAXPROCS(v)
		}
		from = "GOMAXPROCS"
	default:
		runtime.SetDefaultGOMAXPROCS()
		from = "one per CPU"
	}
	return runtime.GOMAXPROCS(0), from
}

// logThreads applies n and logs the result, saying where it came from.
func logThreads(log *slog.Logger, n int) {
	now, from := applyThreads(n)
	log.Info("threads", "threads", now, "from", from)
}
