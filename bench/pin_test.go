// The wrk rows' CPU split and the pinning of a process tree.

package bench

import (
	"os"
	"os/exec"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

func TestSplitCPUs(t *testing.T) {
	for _, tc := range []struct {
		n         int
		pin       bool
		load, fwd []int
	}{
		{n: 1, pin: true},
		{n: 2, load: []int{1}},
		{n: 2, pin: true, load: []int{1}, fwd: []int{0}},
		{n: 3, pin: true, load: []int{1, 2}, fwd: []int{0}},
		{n: 4, load: []int{3}},
		{n: 4, pin: true, load: []int{2, 3}, fwd: []int{0, 1}},
	} {
		s := splitCPUs(tc.n, tc.pin)
		if !slices.Equal(s.load, tc.load) || !slices.Equal(s.fwd, tc.fwd) {
			t.Errorf("splitCPUs(%d, %v) = load %v fwd %v, want %v %v", tc.n, tc.pin, s.load, s.fwd, tc.load, tc.fwd)
		}
	}
}

// TestPinThreadsOfATree pins a shell and the sleep it forks, found by
// processTree, to one CPU, and reads the affinity back.
func TestPinThreadsOfATree(t *testing.T) {
	requireTwoCPUs(t, "to tell a pinned process")
	cmd := exec.Command("sh", "-c", "sleep 30 & wait")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, p := range processTree(cmd.Process.Pid)[1:] {
			unix.Kill(p, unix.SIGKILL)
		}
		cmd.Process.Kill()
		cmd.Wait()
	})
	var tree []int
	for range 100 { // until the shell has forked
		if tree = processTree(cmd.Process.Pid); len(tree) == 2 {
			break
		}
		unix.Nanosleep(&unix.Timespec{Nsec: 10e6}, nil)
	}
	if len(tree) != 2 {
		t.Fatalf("processTree(%d) = %v, want the shell and its sleep", cmd.Process.Pid, tree)
	}
	one := cpuSet([]int{1})
	for _, p := range tree {
		if err := pinThreads(p, one); err != nil {
			t.Fatal(err)
		}
		var got unix.CPUSet
		if err := unix.SchedGetaffinity(p, &got); err != nil {
			t.Fatal(err)
		}
		if got != *one {
			t.Errorf("process %d: affinity %v after pinning to CPU 1", p, got)
		}
	}
}

// TestPlaceKeepsTheOriginOnTheLoadSide pins as --pin does on two CPUs: this
// process (the origin) on the load CPU, a target's process on the
// forwarder's, and undo gives each its affinity back. The origin once
// ended on the forwarder's CPU, pinned there with the targets.
func TestPlaceKeepsTheOriginOnTheLoadSide(t *testing.T) {
	all := requireTwoCPUs(t, "to tell the sides apart")
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	target := &Target{Name: "fwd", pids: func() []int { return []int{cmd.Process.Pid} }}
	s := cpuSplit{load: []int{1}, fwd: []int{0}, pin: true}
	undo, err := s.place([]*Target{target})
	t.Cleanup(undo)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		who  string
		pid  int
		want *unix.CPUSet
	}{{"this process (the origin)", os.Getpid(), cpuSet(s.load)}, {"the target", cmd.Process.Pid, cpuSet(s.fwd)}} {
		var got unix.CPUSet
		if err := unix.SchedGetaffinity(c.pid, &got); err != nil {
			t.Fatal(err)
		}
		if got != *c.want {
			t.Errorf("%s: affinity %v, want %v", c.who, got, *c.want)
		}
	}
	undo()
	var got unix.CPUSet
	if err := unix.SchedGetaffinity(os.Getpid(), &got); err != nil || got != all {
		t.Errorf("after undo this process's affinity is %v (%v), want %v", got, err, all)
	}
}

// requireTwoCPUs skips the test unless this process may run on two CPUs
// or more (why says what the second one is for), and returns the CPUs it
// may run on.
func requireTwoCPUs(tb testing.TB, why string) unix.CPUSet {
	tb.Helper()
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		tb.Fatal(err)
	}
	if all.Count() < 2 {
		tb.Skip("needs two CPUs " + why)
	}
	return all
}
