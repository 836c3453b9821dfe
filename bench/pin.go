// Pinning for web's wrk rows: wrk and the origin on some CPUs, the forwarder under test (splicer, HAProxy, nginx) on the others.

package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// cpuSplit is where the wrk rows run their processes: wrk always on
// load; with pin, the origin (this process) on load too and every
// forwarder on fwd, so that a forwarder neither competes with the load
// side for a CPU nor gets more CPUs than another forwarder.
type cpuSplit struct {
	load, fwd []int
	pin       bool
}

// splitCPUs divides n CPUs: the forwarders get the first half (rounded
// down, at least one), the load side the rest. Without pin, or with fewer
// than two CPUs, only wrk is placed (on the last CPU, away from CPU 0
// where the kernel and the forwarder tend to run); one CPU places nothing.
func splitCPUs(n int, pin bool) cpuSplit {
	if n < 2 {
		return cpuSplit{}
	}
	k := max(n/2, 1)
	s := cpuSplit{pin: pin}
	for c := range n {
		if c < k {
			s.fwd = append(s.fwd, c)
		} else {
			s.load = append(s.load, c)
		}
	}
	if !pin {
		s.load, s.fwd = s.load[len(s.load)-1:], nil
	}
	return s
}

// cpuList writes CPUs as taskset -c takes them: 0,2,3.
func cpuList(cpus []int) string {
	s := make([]string, len(cpus))
	for i, c := range cpus {
		s[i] = strconv.Itoa(c)
	}
	return strings.Join(s, ",")
}

func cpuSet(cpus []int) *unix.CPUSet {
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	return &set
}

// describe says in a note where the wrk rows ran what.
func (s cpuSplit) describe() string {
	switch {
	case len(s.load) == 0:
		return "nothing pinned (one CPU)"
	case !s.pin:
		return "wrk pinned to CPU " + cpuList(s.load) + " with taskset; the forwarders, the origin and softirq processing are not pinned"
	}
	return fmt.Sprintf("pinned (--pin): wrk and the origin on CPU %s, every forwarder (each thread of splicer, HAProxy, nginx) on CPU %s, splicer's GOMAXPROCS and HAProxy's switch threads %d, nginx one worker; softirq processing runs where the sender runs",
		cpuList(s.load), cpuList(s.fwd), len(s.fwd))
}

// apply pins this process (the origin) to the load CPUs and every
// target's processes to the forwarder CPUs, and returns what undoes it.
// Once pinned, it waits until splicer's Go runtime has fitted GOMAXPROCS
// to its CPUs (it checks about once a second), so that splicer does not
// run more threads of Go code than it has CPUs, as HAProxy and nginx,
// which size themselves at start, may.
func (s cpuSplit) apply(ctx context.Context, e *Env, targets []*Target) (undo func(), err error) {
	if !s.pin {
		return func() {}, nil
	}
	undo, err = s.place(targets, e.originPids...)
	if err != nil {
		return undo, err
	}
	return undo, e.waitGOMAXPROCS(ctx, len(s.fwd))
}

// place pins this process (the built-in origin) and the other origin
// processes to the load CPUs and every target's process tree to the
// forwarder CPUs, and returns what restores each one's affinity.
func (s cpuSplit) place(targets []*Target, origins ...int) (undo func(), err error) {
	var fwd []int // every target's processes
	for _, t := range targets {
		for _, p := range t.Pids() {
			fwd = append(fwd, processTree(p)...)
		}
	}
	load := []int{os.Getpid()}
	for _, p := range origins {
		load = append(load, processTree(p)...)
	}
	pids := append(load, fwd...)
	was := make([]unix.CPUSet, len(pids)) // each process's affinity before
	for i, p := range pids {
		if err := unix.SchedGetaffinity(p, &was[i]); err != nil {
			return func() {}, fmt.Errorf("affinity of process %d: %w", p, err)
		}
	}
	undo = func() {
		for i, p := range pids {
			pinThreads(p, &was[i])
		}
	}
	for _, p := range load {
		if err := pinThreads(p, cpuSet(s.load)); err != nil {
			return undo, err
		}
	}
	for _, p := range fwd {
		if err := pinThreads(p, cpuSet(s.fwd)); err != nil {
			return undo, err
		}
	}
	return undo, nil
}

// pinThreads sets the CPU affinity of every thread of process pid; threads
// it starts later inherit it. A process or thread that ended meanwhile is
// skipped.
func pinThreads(pid int, set *unix.CPUSet) error {
	tids, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "task"))
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return err
	}
	for _, d := range tids {
		tid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetaffinity(tid, set); err != nil && err != unix.ESRCH {
			return fmt.Errorf("pin thread %d of process %d: %w", tid, pid, err)
		}
	}
	return nil
}

// processTree is pid and its descendants (nginx's workers, say).
func processTree(pid int) []int {
	parent := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, d := range ents {
		p, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "stat"))
		if err != nil {
			continue
		}
		// The command name, in parentheses, may hold spaces: the fields
		// after its closing parenthesis are state, then the parent.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) < 2 {
			continue
		}
		if pp, err := strconv.Atoi(f[1]); err == nil {
			parent[pp] = append(parent[pp], p)
		}
	}
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		out = append(out, parent[out[i]]...)
	}
	return out
}

// waitGOMAXPROCS waits up to 5 s until splicer's metrics show GOMAXPROCS
// at want (the Go runtime follows its CPU affinity), or says it did not.
func (e *Env) waitGOMAXPROCS(ctx context.Context, want int) error {
	if e.AdminAddr == "" {
		return nil
	}
	deadline := time.Now().Add(5 * time.Second)
	last := -1
	for {
		if n, err := e.gomaxprocs(ctx); err == nil {
			if last = n; n == want {
				return nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("splicer's GOMAXPROCS still %d, not %d, 5 s after pinning", last, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// gomaxprocs reads splicer's GOMAXPROCS from its metrics.
func (e *Env) gomaxprocs(ctx context.Context) (int, error) {
	n, found := 0, false
	var perr error
	err := e.metricLines(ctx, e.AdminAddr, func(line string) bool {
		v, ok := strings.CutPrefix(line, "go_sched_gomaxprocs_threads ")
		if !ok {
			return true
		}
		var f float64
		f, perr = strconv.ParseFloat(strings.TrimSpace(v), 64)
		n, found = int(f), true
		return false
	})
	switch {
	case err != nil:
		return 0, err
	case !found:
		return 0, fmt.Errorf("no go_sched_gomaxprocs_threads in splicer's metrics")
	}
	return n, perr
}
