// Waiting until every segment already past tc ingress has reached its socket: a visit to every CPU (microseconds), or an RCU grace period (milliseconds) where a visit proves nothing.

package tcprepair

import (
	"errors"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// quiesce returns once every segment that passed tc ingress before the
// call has been handed to its socket (or to the socket's backlog, which
// the next lock holder processes). It reports false when it could not
// wait at all, for the caller to wait another way.
//
// A segment goes from tc ingress to tcp_v4_rcv in one softirq run, with
// bottom halves disabled: the CPU cannot switch tasks in between. So once
// a thread of this process has run on every online CPU after the call,
// every such run that was under way at the call has ended: a thread
// pinned to each CPU is woken there (visitors.go), or else the calling
// thread moves to each in turn. That is an RCU-bh grace period, taken in
// microseconds where synchronize_rcu takes about 10 ms. It proves nothing
// when softirqs are preemptible (PREEMPT_RT) or when this process may not
// run on some CPU (cpusets): then membarrier(MEMBARRIER_CMD_GLOBAL), which
// calls synchronize_rcu, waits for a full grace period.
func quiesce() bool {
	if !softirqPreemptible() && (wakeEveryCPU() || visitEveryCPU()) {
		return true
	}
	const membarrierCmdGlobal = 1
	_, _, errno := syscall.Syscall(unix.SYS_MEMBARRIER, membarrierCmdGlobal, 0, 0)
	return errno == 0
}

// softirqPreemptible reports a PREEMPT_RT kernel, whose softirqs run in
// preemptible threads. The kernel cannot change while running: read once,
// not on every splice.
var softirqPreemptible = sync.OnceValue(func() bool {
	b, err := os.ReadFile("/sys/kernel/realtime")
	return err == nil && strings.TrimSpace(string(b)) == "1"
})

// visitEveryCPU runs the calling thread on each online CPU in turn and
// restores its affinity. It reports false if some online CPU is outside
// the thread's allowed set or a move failed.
//
// The thread visits as a real-time task (SCHED_FIFO) where it may
// (CAP_SYS_NICE): it then preempts whatever ordinary task a CPU runs and
// waits only for what it must, the softirq in progress. As an ordinary
// task it waits its turn behind every runnable task on each CPU: on a
// loaded machine (two CPUs, load 5) that took up to 800 ms, a pair held
// all along. The CPU the thread is on
// needs no move: running there, in process context, the thread proves
// that CPU is in no softirq run begun before the call. On 2 CPUs that is
// one migration instead of one or two (75-85 us instead of 90-110 us
// here, loaded).
func visitEveryCPU() bool {
	cpus, err := OnlineCPUs()
	if err != nil {
		return false
	}
	runtime.LockOSThread()
	var allowed unix.CPUSet
	if err := unix.SchedGetaffinity(0, &allowed); err != nil {
		runtime.UnlockOSThread()
		return false
	}
	restore, ok := realTime()
	here := currentCPU()
	for _, cpu := range cpus {
		if cpu == here {
			continue
		}
		if !allowed.IsSet(cpu) || !runOn(cpu) {
			ok = false
			break
		}
	}
	if unix.SchedSetaffinity(0, &allowed) != nil || !restore() {
		// The thread keeps a one-CPU affinity or a real-time policy:
		// let it die with this goroutine rather than serve others (no
		// UnlockOSThread).
		return false
	}
	runtime.UnlockOSThread()
	return ok
}

// realTime makes the calling (locked) thread SCHED_FIFO at the lowest
// real-time priority, if it may; restore puts its old policy back and
// reports whether it could. ok is true either way.
func realTime() (restore func() bool, ok bool) {
	noop := func() bool { return true }
	old, err := unix.SchedGetAttr(0, 0)
	if err != nil {
		return noop, true
	}
	rt := unix.SchedAttr{Policy: unix.SCHED_FIFO, Priority: 1}
	if unix.SchedSetAttr(0, &rt, 0) != nil {
		return noop, true // no CAP_SYS_NICE: an ordinary visit
	}
	return func() bool { return unix.SchedSetAttr(0, old, 0) == nil }, true
}

// runOn moves the calling thread to cpu; sched_setaffinity returns once
// the thread runs there, which getcpu confirms.
func runOn(cpu int) bool {
	var one unix.CPUSet
	one.Set(cpu)
	if unix.SchedSetaffinity(0, &one) != nil {
		return false
	}
	for range 100 {
		if currentCPU() == cpu {
			return true
		}
		runtime.Gosched()
	}
	return false
}

func currentCPU() int {
	var cpu uint32
	_, _, errno := unix.RawSyscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&cpu)), 0, 0)
	if errno != 0 {
		return -1
	}
	return int(cpu)
}

// OnlineCPUs parses /sys/devices/system/cpu/online ("0-3,5,7-8"), read
// afresh at every call (a CPU may come online at any time) from a
// descriptor kept open: opening the file took 20 of the 45 µs a visit to
// the other CPU of a 2-CPU machine took.
func OnlineCPUs() ([]int, error) {
	online.mu.Lock()
	defer online.mu.Unlock()
	if online.f == nil {
		f, err := os.Open("/sys/devices/system/cpu/online")
		if err != nil {
			return nil, err
		}
		online.f = f
	}
	n, err := online.f.ReadAt(online.buf[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	if n == len(online.buf) {
		return nil, errors.New("/sys/devices/system/cpu/online: longer than expected")
	}
	return parseCPUList(strings.TrimSpace(string(online.buf[:n])))
}

// online is the open CPU list onlineCPUs reads; a sysfs attribute is
// generated anew by each read from offset 0.
var online struct {
	mu  sync.Mutex
	f   *os.File
	buf [4096]byte
}

func parseCPUList(s string) ([]int, error) {
	var cpus []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		first, err := strconv.Atoi(lo)
		if err != nil {
			return nil, err
		}
		last := first
		if isRange {
			if last, err = strconv.Atoi(hi); err != nil {
				return nil, err
			}
		}
		for c := first; c <= last; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}
