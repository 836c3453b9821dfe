// What the master does to processes and time, behind an interface: the real one forks, signals, waits and execs; tests give the master a fake and check its decisions without running a binary.

package supervisor

import (
	"os"
	"syscall"
	"time"

	"github.com/splicer/splicer/internal/handoff"
)

// sys is the master's access to processes and the clock.
type sys interface {
	// startWorker runs exe with args as a worker on files, env added
	// to this process's environment, with caps (withAmbient), and
	// returns once it serves: its pid, and its end.
	startWorker(exe string, args []string, files map[string]*os.File, env []string, caps []uintptr) (pid int, exited <-chan error, err error)
	// kill sends sig to process pid.
	kill(pid int, sig syscall.Signal) error
	// waitEnd blocks until process pid, which need not be a child,
	// has ended, and says how where it can tell.
	waitEnd(pid int) error
	// exec replaces this process's binary with exe (execve), with
	// caps; it returns only when that fails.
	exec(exe string, args, env []string, caps []uintptr) error
	// afterFunc runs f in its own goroutine after d.
	afterFunc(d time.Duration, f func())
	now() time.Time
}

// osSys is the real thing.
type osSys struct{}

func (osSys) startWorker(exe string, args []string, files map[string]*os.File, env []string, caps []uintptr) (int, <-chan error, error) {
	var child *handoff.Child
	err := withAmbient(caps, func() (err error) {
		child, err = handoff.StartAs(exe, args, files, UpgradeTimeout, nil, env...)
		return err
	})
	if err != nil {
		return 0, nil, err
	}
	return child.Process.Pid, child.Exited(), nil
}

func (osSys) kill(pid int, sig syscall.Signal) error { return syscall.Kill(pid, sig) }

func (osSys) waitEnd(pid int) error { return waitEnd(pid) }

func (osSys) exec(exe string, args, env []string, caps []uintptr) error {
	return withAmbient(caps, func() error { return syscall.Exec(exe, args, env) })
}

func (osSys) afterFunc(d time.Duration, f func()) { time.AfterFunc(d, f) }

func (osSys) now() time.Time { return time.Now() }
