// Tests of the softirq watch: the waiting logic on made-up readings, and the programs on a real device.

package bhwatch

import (
	"context"
	"errors"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/splicer/splicer/internal/testenv"
	"github.com/splicer/splicer/lab"
)

// readings returns a reader that hands out states in turn, repeating the
// last, and counts the reads.
func readings(states ...[]cpuState) (func() ([]cpuState, error), *int) {
	n := new(int)
	return func() ([]cpuState, error) {
		s := states[min(*n, len(states)-1)]
		*n++
		return s, nil
	}, n
}

func onlineAll() ([]int, error) { return []int{0, 1, 2}, nil }

// TestWaitDone: WaitDone ends at a reading where every CPU marked at the
// first is clear or counted a NET_RX run since; a CPU that stays marked
// makes it give up after its bound, unless that CPU is offline.
func TestWaitDone(t *testing.T) {
	idle := []cpuState{{}, {}, {}}
	busy1 := []cpuState{{}, {Busy: 1, Exits: 7}, {}}
	for _, c := range []struct {
		name   string
		states [][]cpuState
		online func() ([]int, error)
		want   bool
		reads  int // at most
	}{
		{"no CPU marked: one reading", [][]cpuState{idle}, onlineAll, true, 1},
		{"the mark cleared", [][]cpuState{busy1, busy1, idle}, onlineAll, true, 3},
		{"marked again after a NET_RX run", [][]cpuState{busy1, {{}, {Busy: 1, Exits: 8}, {}}}, onlineAll, true, 2},
		{"marked all along", [][]cpuState{busy1}, onlineAll, false, 1 << 30},
		{"marked all along, but offline", [][]cpuState{busy1}, func() ([]int, error) { return []int{0, 2}, nil }, true, 1 << 30},
		{"no online list", [][]cpuState{busy1}, func() ([]int, error) { return nil, errors.New("no sysfs") }, false, 1 << 30},
	} {
		t.Run(c.name, func(t *testing.T) {
			read, n := readings(c.states...)
			if got := waitDone(read, c.online, 200*time.Microsecond); got != c.want {
				t.Errorf("waitDone = %v, want %v", got, c.want)
			}
			if *n > c.reads {
				t.Errorf("%d readings, want at most %d", *n, c.reads)
			}
		})
	}
	failing := func() ([]cpuState, error) { return nil, errors.New("closed") }
	if waitDone(failing, onlineAll, time.Millisecond) {
		t.Error("waitDone = true without a reading")
	}
}

// TestMarksFollowSegments: segments through a device with the marker
// mark their CPU, and the NET_RX runs that carried them clear the mark
// (counted in exits); afterwards WaitDone ends at once.
func TestMarksFollowSegments(t *testing.T) {
	testenv.RequireRoot(t)
	w, err := Load()
	if err != nil {
		testenv.SkipOrFail(t, err.Error())
	}
	t.Cleanup(func() { w.Close() })
	l := lab.NewT(t, lab.DefaultConfig())
	if err := l.Fwd.Do(func() error {
		ifi, err := net.InterfaceByName(lab.FwdClientIf)
		if err != nil {
			return err
		}
		return w.Attach(ifi.Index)
	}); err != nil {
		t.Fatal(err)
	}
	exits := func() (sum uint64) {
		st, err := w.read()
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range st {
			sum += s.Exits
		}
		return sum
	}
	before := exits()
	ln, err := l.Fwd.Listen("tcp", net.JoinHostPort(l.Cfg.FwdClient.Addr().String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Wait)
	defer cancel()
	c, err := l.Client.Dial(ctx, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := c.Write(make([]byte, 64<<10)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Read(make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	if after := exits(); after == before {
		t.Errorf("no NET_RX run cleared a mark (exits %d before and after): the marker or the tracepoint sees nothing", before)
	}
	if !w.WaitDone(10*time.Millisecond, onlineAll) {
		t.Error("WaitDone gave up on an idle lab")
	}
}

// TestMarkerLeavesAMarkedCPU: the marker writes its CPU's slot only when
// the mark is clear, so the later segments of a NET_RX run pay no locked
// exchange; a clear CPU it marks. The slots are seeded with a mark of 2,
// which only the marker's own write (1) can replace: a NET_RX run in
// between clears it (0), never to 1.
func TestMarkerLeavesAMarkedCPU(t *testing.T) {
	testenv.RequireRoot(t)
	w, err := Load()
	if err != nil {
		testenv.SkipOrFail(t, err.Error())
	}
	t.Cleanup(func() { w.Close() })
	seed := func(busy uint64) {
		t.Helper()
		st, err := w.read()
		if err != nil {
			t.Fatal(err)
		}
		for i := range st {
			st[i].Busy = busy
		}
		if err := w.objs.BhwatchCpus.Put(uint32(0), st); err != nil {
			t.Fatal(err)
		}
	}
	mark := func() []cpuState {
		t.Helper()
		if _, err := w.objs.BhwatchMark.Run(&ebpf.RunOptions{Data: make([]byte, 64)}); err != nil {
			t.Fatal(err)
		}
		st, err := w.read()
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	seed(2)
	for cpu, s := range mark() {
		if s.Busy == 1 {
			t.Errorf("CPU %d: the marker wrote its mark again over a set one", cpu)
		}
	}
	seed(0)
	st := mark()
	if !slices.ContainsFunc(st, func(s cpuState) bool { return s.Busy == 1 }) && !slices.ContainsFunc(st, func(s cpuState) bool { return s.Exits != 0 }) {
		t.Errorf("the marker left every CPU clear: %+v", st)
	}
}
