// The capabilities a daemon keeps once it runs as `user:` (or as a service user given some): only those its enabled engines and listeners need, in its permitted and bounding sets, none in its ambient set once it serves; raised again only on the thread that starts its next process (a worker, an upgrade).

package supervisor

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/splicer/splicer/internal/config"
)

// neededCaps are the capabilities cfg needs once serving: engine ip's
// tc programs, TCP_REPAIR and raw sockets (CAP_NET_ADMIN, CAP_BPF,
// CAP_PERFMON for the verifier's variable stack access and its BTF
// reads, CAP_NET_RAW), sockmap's programs and maps (CAP_BPF,
// CAP_NET_ADMIN), a master's program spreading connections over its
// workers (CAP_BPF), and a reload binding a port below 1024
// (CAP_NET_BIND_SERVICE) where the file has one. Not CAP_SYS_ADMIN:
// engine ip does not switch namespaces when it runs in its home one.
// Turning an engine on by a reload takes a restart to get its
// capabilities.
func neededCaps(cfg *config.Config) []uintptr {
	var out []uintptr
	add := func(caps ...uintptr) {
		for _, c := range caps {
			if !slices.Contains(out, c) {
				out = append(out, c)
			}
		}
	}
	if cfg.Engines.IP.Enabled {
		add(unix.CAP_NET_ADMIN, unix.CAP_BPF, unix.CAP_PERFMON, unix.CAP_NET_RAW)
	}
	if cfg.Engines.Sockmap.Enabled {
		add(unix.CAP_NET_ADMIN, unix.CAP_BPF)
	}
	if cfg.Workers.Master() {
		add(unix.CAP_BPF)
	}
	if lowPort(cfg) {
		add(unix.CAP_NET_BIND_SERVICE)
	}
	slices.Sort(out)
	return out
}

// lowPort reports whether cfg binds a port below 1024.
func lowPort(cfg *config.Config) bool {
	addrs := []string{cfg.Admin}
	for _, l := range cfg.Listeners {
		addrs = append(addrs, l.Listen)
	}
	for _, a := range addrs {
		if i := strings.LastIndexByte(a, ':'); i >= 0 {
			if p, err := strconv.Atoi(a[i+1:]); err == nil && p > 0 && p < 1024 {
				return true
			}
		}
	}
	return false
}

// capNames names caps for logs: "CAP_BPF CAP_NET_ADMIN", or "none".
func capNames(caps []uintptr) string {
	names := map[uintptr]string{unix.CAP_NET_BIND_SERVICE: "CAP_NET_BIND_SERVICE", unix.CAP_NET_ADMIN: "CAP_NET_ADMIN",
		unix.CAP_NET_RAW: "CAP_NET_RAW", unix.CAP_PERFMON: "CAP_PERFMON", unix.CAP_BPF: "CAP_BPF"}
	var out []string
	for _, c := range caps {
		if n, ok := names[c]; ok {
			out = append(out, n)
		} else {
			out = append(out, "cap "+strconv.Itoa(int(c)))
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, " ")
}

// startBounded runs start, which forks and execs the process running as
// the user, on a thread whose bounding set is shrunk to keep: the new
// process can never regain another capability. The thread is not
// given back (its goroutine ends locked to it), so that nothing else
// in this root process runs on it.
func startBounded[T any](keep []uintptr, start func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		var r result
		if r.err = shrinkBounding(keep); r.err == nil {
			r.v, r.err = start()
		}
		done <- r
	}()
	r := <-done
	return r.v, r.err
}

// shrinkBounding drops every capability but keep from this thread's
// bounding set (it needs CAP_SETPCAP: root).
func shrinkBounding(keep []uintptr) error {
	for c := uintptr(0); c <= lastCap(); c++ {
		if slices.Contains(keep, c) {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, c, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("bounding set: drop capability %d: %w", c, err)
		}
	}
	return nil
}

// lastCap is the kernel's highest capability number.
func lastCap() uintptr {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if n, err2 := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && err2 == nil {
		return uintptr(n)
	}
	return unix.CAP_LAST_CAP
}

// settleCaps, in a process that serves without being root, keeps only
// keep of its permitted, effective and inheritable capabilities and
// empties its ambient set, on every thread: what it starts later gets
// no capability unless withAmbient gives it. A binary that links cgo
// cannot change every thread (syscall.AllThreadsSyscall); it says so.
func settleCaps(keep []uintptr, log *slog.Logger) {
	if os.Geteuid() == 0 {
		return
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		log.Warn("capabilities: capget", "err", err)
		return
	}
	var want [2]uint32
	for _, c := range keep {
		want[c/32] |= 1 << (c % 32)
	}
	for i := range data {
		data[i].Permitted &= want[i]
		data[i].Effective = data[i].Permitted
		data[i].Inheritable = data[i].Permitted
	}
	if err := allThreads(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); err != nil {
		log.Warn("capabilities kept as started: cannot set them on every thread (a binary built with cgo; build with CGO_ENABLED=0)", "err", err)
		return
	}
	if err := allThreads(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0); err != nil {
		log.Warn("capabilities: ambient set not cleared", "err", err)
		return
	}
	log.Debug("capabilities", "kept", capNames(keep))
}

// allThreads makes a system call on every thread of the process.
func allThreads(trap, a1, a2, a3 uintptr) error {
	if _, _, errno := syscall.AllThreadsSyscall(trap, a1, a2, a3); errno != 0 {
		return errno
	}
	return nil
}

// withAmbient runs start, which starts a program (fork and exec, or
// execve in place), on a thread whose ambient set holds keep: a
// program running as a user other than root keeps only its ambient
// capabilities across execve. The thread's ambient set is emptied after.
// A capability this process lacks is left out.
func withAmbient(keep []uintptr, start func() error) error {
	if os.Geteuid() == 0 || len(keep) == 0 {
		return start()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for _, c := range keep {
		unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_RAISE, c, 0, 0)
	}
	defer unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
	return start()
}
