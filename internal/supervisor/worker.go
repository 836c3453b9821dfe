// Worker mode of 'splicer run': one of the processes a master started (workers > 1), serving every listener on its own SO_REUSEPORT socket.

package supervisor

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/splicer/splicer/internal/config"
)

// worker is one worker's place among the master's.
type worker struct{ index, count int }

// adjust makes cfg this worker's: engine ip pins in a directory of its
// own (a restarted worker adopts only its own pairs) and hands out its own
// share of local ports (two processes must not pick one port toward one
// server), and Go runs on its share of the CPUs unless threads says.
func (w worker) adjust(cfg *config.Config) {
	ip := &cfg.Engines.IP
	if ip.PinDir != "" && ip.PinDir != config.PinDirOff {
		ip.PinDir = filepath.Join(ip.PinDir, "worker-"+strconv.Itoa(w.index))
	}
	if low, high, ok, err := ip.PortRange(); ok && err == nil {
		ip.LocalPorts = w.share(low, high)
	}
	if cfg.Threads == 0 {
		cfg.Threads = max(1, runtime.NumCPU()/w.count)
	}
}

// share is this worker's part of the port range low-high: equal parts,
// the last taking what is left over.
func (w worker) share(low, high uint16) string {
	size := (int(high) - int(low) + 1) / w.count
	from := int(low) + w.index*size
	to := from + size - 1
	if w.index == w.count-1 {
		to = int(high)
	}
	return fmt.Sprintf("%d-%d", from, to)
}

// startedByMaster reports whether this worker's process is the one its
// master (masterPid, 0 if unknown) started, not the new process of the
// worker's upgrade.
func startedByMaster(masterPid int) bool { return masterPid != 0 && os.Getppid() == masterPid }

// masterGone is closed once the master that started this worker (pid,
// from masterPidEnv) has ended: killed, say, since a master that stops
// stops its workers first. The worker then drains and exits rather than
// serve on with nobody to restart, reload or stop it. Nil outside a
// worker.
func masterGone(pid int) <-chan struct{} {
	if pid == 0 {
		return nil
	}
	gone := make(chan struct{})
	go func() {
		for syscall.Kill(pid, 0) != syscall.ESRCH {
			time.Sleep(time.Second)
		}
		close(gone)
	}()
	return gone
}
