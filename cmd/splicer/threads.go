// The threads key: how many threads run Go code at once (GOMAXPROCS), set at start and by each reload.

package main

import (
	"log/slog"
	"os"
	"runtime"
	"strconv"
)

// applyThreads sets GOMAXPROCS to n, or with n 0 to what the process
// started with: the GOMAXPROCS environment variable if set, else Go's
// default (the CPUs the process may use, following its affinity and
// cgroup quota). It returns the setting now in force.
func applyThreads(n int) int {
	switch env := os.Getenv("GOMAXPROCS"); {
	case n > 0:
		runtime.GOMAXPROCS(n)
	case env != "":
		if v, err := strconv.Atoi(env); err == nil && v > 0 {
			runtime.GOMAXPROCS(v)
		}
	default:
		runtime.SetDefaultGOMAXPROCS()
	}
	return runtime.GOMAXPROCS(0)
}

// logThreads applies n and logs the result, saying where it came from.
func logThreads(log *slog.Logger, n int) {
	from := "threads"
	if n == 0 {
		from = "one per CPU"
		if os.Getenv("GOMAXPROCS") != "" {
			from = "GOMAXPROCS"
		}
	}
	log.Info("threads", "threads", applyThreads(n), "from", from)
}
