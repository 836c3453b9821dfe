// Visiting every CPU without moving: a thread pinned to each CPU, woken through an eventfd, answers that its CPU scheduled it.

package tcprepair

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	// visitSpin is how long a waiter polls a visitor's answer before it
	// blocks until the next answer; visitWait how long it waits at all before
	// moving to that CPU itself (visitEveryCPU).
	visitSpin = 200 * time.Microsecond
	visitWait = 10 * time.Millisecond
)

// wakeEveryCPU proves, like visitEveryCPU, that every online CPU ran a
// task after the call, without moving the calling thread: its own CPU is
// observed by the caller, every other one by its visitor, woken for it.
// One wakeup of a pinned thread took half as long as a migration here
// (about 50-90 us against 100-200 us, p50, on a loaded 2-CPU VM). It
// reports false when some CPU has no visitor or its visitor did not answer
// in time; the caller then visits another way.
func wakeEveryCPU() bool {
	cpus, err := OnlineCPUs()
	if err != nil {
		return false
	}
	here := currentCPU()
	type ask struct {
		v *visitor
		n uint64
	}
	var asks []ask
	for _, cpu := range cpus {
		if cpu == here {
			continue
		}
		v := visitorOn(cpu)
		if v == nil {
			return false
		}
		n, err := v.ask()
		if err != nil {
			return false
		}
		asks = append(asks, ask{v, n})
	}
	start := time.Now()
	for _, a := range asks {
		if !a.v.await(a.n, start) {
			return false
		}
	}
	return true
}

// visitor is a goroutine locked to a thread pinned to one CPU, blocked
// reading an eventfd. Each wakeup it takes as a visit: running on its CPU
// it answers every visit asked before it looked, which proves that CPU
// scheduled it, so was in no softirq run, after those visits were asked.
type visitor struct {
	cpu  int
	tid  int // its thread, for tests
	wake int // eventfd
	// asked counts visits asked; seen the asks answered.
	asked, seen atomic.Uint64
	// answered is closed, and replaced, at every answer, for waiters
	// that stopped polling.
	mu       sync.Mutex
	answered chan struct{}
}

// visitors holds one visitor per CPU, started on first use and kept for
// the life of the process (a parked thread each); failed marks CPUs where
// none can run.
var visitors struct {
	mu     sync.Mutex
	byCPU  map[int]*visitor
	failed map[int]bool
}

// visitorOn returns cpu's visitor, starting it if needed, or nil if none
// can run there (the CPU is outside the process's allowed set).
func visitorOn(cpu int) *visitor {
	visitors.mu.Lock()
	defer visitors.mu.Unlock()
	if v := visitors.byCPU[cpu]; v != nil {
		return v
	}
	if visitors.failed[cpu] {
		return nil
	}
	v, err := startVisitor(cpu)
	if err != nil {
		if err == unix.EINVAL { // not in the allowed set: never will be
			if visitors.failed == nil {
				visitors.failed = make(map[int]bool)
			}
			visitors.failed[cpu] = true
		}
		return nil
	}
	if visitors.byCPU == nil {
		visitors.byCPU = make(map[int]*visitor)
	}
	visitors.byCPU[cpu] = v
	return v
}

func startVisitor(cpu int) (*visitor, error) {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	v := &visitor{cpu: cpu, wake: fd, answered: make(chan struct{})}
	started := make(chan error)
	go v.run(started)
	if err := <-started; err != nil {
		unix.Close(fd)
		return nil, err
	}
	return v, nil
}

// run pins the thread to v.cpu and answers visits. It asks for SCHED_FIFO
// (needs CAP_SYS_NICE; without it the thread stays a normal one): a woken
// real-time thread preempts whatever runs on its CPU at once, where a
// normal one may wait out the running task's slice, milliseconds on a
// busy CPU. It runs a few microseconds per visit and blocks otherwise.
func (v *visitor) run(started chan<- error) {
	runtime.LockOSThread()
	var one unix.CPUSet
	one.Set(v.cpu)
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		started <- err
		return // the thread ends with the goroutine, still locked
	}
	if !runOn(v.cpu) {
		started <- errors.New("not moved to its CPU")
		return
	}
	v.tid = unix.Gettid()
	param := struct{ priority int32 }{1}
	const schedFIFO = 1
	syscall.RawSyscall(unix.SYS_SCHED_SETSCHEDULER, 0, schedFIFO, uintptr(unsafe.Pointer(&param)))
	started <- nil
	var buf [8]byte
	for {
		_, _, errno := syscall.Syscall(unix.SYS_READ, uintptr(v.wake), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)))
		if errno != 0 && errno != unix.EINTR && errno != unix.EAGAIN {
			// Never spin: the waiters time out and visit another way.
			return
		}
		// Asks counted before this look are answered by it.
		asked := v.asked.Load()
		if currentCPU() != v.cpu {
			// Moved (its CPU went offline and came back, or someone
			// changed its affinity): pin it again and look again.
			if !runOn(v.cpu) {
				continue
			}
		}
		for {
			seen := v.seen.Load()
			if seen >= asked || v.seen.CompareAndSwap(seen, asked) {
				break
			}
		}
		v.mu.Lock()
		close(v.answered)
		v.answered = make(chan struct{})
		v.mu.Unlock()
	}
}

// ask asks v for a visit and returns the number to await.
func (v *visitor) ask() (uint64, error) {
	n := v.asked.Add(1)
	one := [8]byte{1}
	if _, err := unix.Write(v.wake, one[:]); err != nil {
		return 0, err
	}
	return n, nil
}

// await waits until v answered visit n: polling for visitSpin after
// start, then woken by each answer; false after visitWait.
func (v *visitor) await(n uint64, start time.Time) bool {
	for v.seen.Load() < n {
		if time.Since(start) < visitSpin {
			runtime.Gosched()
			continue
		}
		v.mu.Lock()
		answered := v.answered
		v.mu.Unlock()
		if v.seen.Load() >= n {
			return true
		}
		select {
		case <-answered:
		case <-time.After(visitWait - time.Since(start)):
			return v.seen.Load() >= n
		}
	}
	return true
}
