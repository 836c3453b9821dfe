// Tests of quiesce: the CPU list parser, and that a visit to every CPU returns with the thread's affinity as it was.

package tcprepair

import (
	"runtime"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestParseCPUList(t *testing.T) {
	for in, want := range map[string][]int{
		"0":         {0},
		"0-1":       {0, 1},
		"0-3,5,7-8": {0, 1, 2, 3, 5, 7, 8},
	} {
		got, err := parseCPUList(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("parseCPUList(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "a", "1-b"} {
		if _, err := parseCPUList(bad); err == nil {
			t.Errorf("parseCPUList(%q) accepted", bad)
		}
	}
}

func TestVisitEveryCPUKeepsAffinity(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var before, after unix.CPUSet
	if err := unix.SchedGetaffinity(0, &before); err != nil {
		t.Fatal(err)
	}
	cpus, err := OnlineCPUs()
	if err != nil {
		t.Fatal(err)
	}
	allAllowed := true
	for _, c := range cpus {
		allAllowed = allAllowed && before.IsSet(c)
	}
	if got := visitEveryCPU(); got != allAllowed {
		t.Errorf("visitEveryCPU() = %v with every online CPU allowed = %v", got, allAllowed)
	}
	if err := unix.SchedGetaffinity(0, &after); err != nil {
		t.Fatal(err)
	}
	if before != after {
		t.Errorf("affinity after the visit %v, before %v", after, before)
	}
}

// TestGracesShared: many callers at once, waiting or starting, all get
// the end of a grace period, and the Graces is idle again afterwards.
func TestGracesShared(t *testing.T) {
	var g Graces
	done := make(chan struct{})
	const n = 64
	for i := range n {
		go func() {
			if i%2 == 0 {
				g.Wait()
			} else {
				<-g.Start()
			}
			done <- struct{}{}
		}()
	}
	timeout := time.After(10 * time.Second)
	for range n {
		select {
		case <-done:
		case <-timeout:
			t.Fatal("a caller still waits for its grace period")
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.running || len(g.waiting) != 0 {
		t.Errorf("after every caller returned: running %v, %d waiting", g.running, len(g.waiting))
	}
}

// TestWakeEveryCPU: with every online CPU allowed, the visitors answer
// without touching the caller's affinity, and one moved off its CPU by
// someone else goes back and answers the next time.
func TestWakeEveryCPU(t *testing.T) {
	cpus, err := OnlineCPUs()
	if err != nil {
		t.Fatal(err)
	}
	var allowed unix.CPUSet
	if err := unix.SchedGetaffinity(0, &allowed); err != nil {
		t.Fatal(err)
	}
	for _, c := range cpus {
		if !allowed.IsSet(c) {
			t.Skipf("CPU %d is online but not allowed", c)
		}
	}
	if len(cpus) < 2 {
		t.Skip("one CPU: nothing to visit")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// A visitor that cannot run within visitWait (a host too busy to give
	// it its CPU) makes one attempt fail; not three in a row.
	wake := func() bool { return wakeEveryCPU() || wakeEveryCPU() || wakeEveryCPU() }
	if !wake() {
		t.Fatal("wakeEveryCPU failed with every CPU allowed")
	}
	// Move some visitor (not of the CPU this thread is on, which needs
	// none) elsewhere; it must find its way back.
	var moved *visitor
	here := currentCPU()
	for _, c := range cpus {
		if c != here {
			moved = visitorOn(c)
			break
		}
	}
	var elsewhere unix.CPUSet
	elsewhere.Set(here)
	if err := unix.SchedSetaffinity(moved.tid, &elsewhere); err != nil {
		t.Fatal(err)
	}
	if currentCPU() != here {
		t.Skip("this thread moved meanwhile")
	}
	if !wake() {
		t.Fatal("wakeEveryCPU failed after a visitor was moved")
	}
	var back, own unix.CPUSet
	own.Set(moved.cpu)
	if err := unix.SchedGetaffinity(moved.tid, &back); err != nil || back != own {
		t.Errorf("the moved visitor of CPU %d has affinity %v, %v", moved.cpu, back, err)
	}
	var after unix.CPUSet
	if err := unix.SchedGetaffinity(0, &after); err != nil {
		t.Fatal(err)
	}
	if after != allowed {
		t.Errorf("affinity after the visits %v, before %v", after, allowed)
	}
}
