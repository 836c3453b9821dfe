// Package fdlimit raises the open-file limit: every pair holds two sockets, and the peers the bench starts inherit the limit.
package fdlimit

import (
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Raise lifts RLIMIT_NOFILE to the hard limit, and as root to the
// kernel's nr_open, so that tens of thousands of pairs fit.
func Raise() {
	var lim unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &lim) != nil {
		return
	}
	want := lim.Max
	if os.Geteuid() == 0 {
		if b, err := os.ReadFile("/proc/sys/fs/nr_open"); err == nil {
			if n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil && n > want {
				want = n
			}
		}
	}
	want = min(want, 1<<20)
	if lim.Cur >= want {
		return
	}
	lim.Cur = want
	if lim.Max < want {
		lim.Max = want
	}
	unix.Setrlimit(unix.RLIMIT_NOFILE, &lim)
}
