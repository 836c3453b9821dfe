// Loading the bhwatch programs, attaching the marker to devices, and waiting until every CPU is done with the segments that passed before.

package bhwatch

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// Watcher holds the loaded programs: the tracepoint is attached by Load,
// the marker to each device by Attach. Its methods are safe for
// concurrent use.
type Watcher struct {
	objs bhwatchObjects
	done link.Link

	mu    sync.Mutex
	marks map[int]link.Link // by device index
}

// Load loads the programs and attaches the tracepoint.
func Load() (*Watcher, error) {
	w := &Watcher{marks: make(map[int]link.Link)}
	if err := loadBhwatchObjects(&w.objs, nil); err != nil {
		return nil, fmt.Errorf("bhwatch: load (needs CAP_BPF and CAP_PERFMON): %w", err)
	}
	l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: "softirq_exit", Program: w.objs.BhwatchDone})
	if err != nil {
		w.objs.Close()
		return nil, fmt.Errorf("bhwatch: attach to the softirq_exit tracepoint: %w", err)
	}
	w.done = l
	return w, nil
}

// Attach puts the marker first on ingress of the device ifindex of the
// calling thread's namespace, once.
func (w *Watcher) Attach(ifindex int) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.marks == nil {
		return errors.New("bhwatch: closed")
	}
	if _, ok := w.marks[ifindex]; ok {
		return nil
	}
	l, err := link.AttachTCX(link.TCXOptions{
		Interface: ifindex,
		Program:   w.objs.BhwatchMark,
		Attach:    ebpf.AttachTCXIngress,
		Anchor:    link.Head(),
	})
	if err != nil {
		return fmt.Errorf("bhwatch: attach to device %d: %w", ifindex, err)
	}
	w.marks[ifindex] = l
	return nil
}

// Close detaches and unloads the programs.
func (w *Watcher) Close() error {
	w.mu.Lock()
	marks := w.marks
	w.marks = nil
	w.mu.Unlock()
	var errs []error
	for _, l := range marks {
		errs = append(errs, l.Close())
	}
	errs = append(errs, w.done.Close(), w.objs.Close())
	return errors.Join(errs...)
}

// cpuState is one CPU's mark and count of NET_RX runs that cleared it.
type cpuState = bhwatchBhwatchCpu

// read returns every possible CPU's state, by CPU number.
func (w *Watcher) read() ([]cpuState, error) {
	var st []cpuState
	if err := w.objs.BhwatchCpus.Lookup(uint32(0), &st); err != nil {
		return nil, fmt.Errorf("bhwatch: read: %w", err)
	}
	return st, nil
}

// fenceWord is the target of fence's atomic add.
var fenceWord atomic.Uint64

// fence is a full memory barrier (x86's locked add): the caller's earlier
// stores, the pair's insertion among them, are visible to every CPU
// before its later loads, the reading of the marks among them.
func fence() { fenceWord.Add(1) }

// WaitDone returns true once every CPU has delivered every segment that
// passed tc ingress, on a device with the marker, before the call: its
// mark was clear, or its count of NET_RX runs moved, at a reading after
// the call. It reads again until within has passed and returns false if
// some online CPU stayed marked (online lists them), or a reading
// failed: the caller then waits another way.
func (w *Watcher) WaitDone(within time.Duration, online func() ([]int, error)) bool {
	fence()
	return waitDone(w.read, online, within)
}

// waitDone is WaitDone's logic over a reader of the CPUs' states and of
// the online CPUs.
func waitDone(read func() ([]cpuState, error), online func() ([]int, error), within time.Duration) bool {
	first, err := read()
	if err != nil {
		return false
	}
	var pending []int
	for cpu, s := range first {
		if s.Busy != 0 {
			pending = append(pending, cpu)
		}
	}
	start := time.Now()
	for len(pending) > 0 {
		if time.Since(start) >= within {
			return allOffline(pending, online)
		}
		runtime.Gosched()
		cur, err := read()
		if err != nil {
			return false
		}
		left := pending[:0]
		for _, cpu := range pending {
			if cpu < len(cur) && cur[cpu].Busy != 0 && cur[cpu].Exits == first[cpu].Exits {
				left = append(left, cpu)
			}
		}
		pending = left
	}
	return true
}

// allOffline reports whether every CPU in cpus is offline: an offline
// CPU carries no segment, whatever its mark last said.
func allOffline(cpus []int, online func() ([]int, error)) bool {
	on, err := online()
	if err != nil {
		return false
	}
	for _, c := range cpus {
		if slices.Contains(on, c) {
			return false
		}
	}
	return true
}
