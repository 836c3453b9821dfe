// detachedGC: the collector's headroom is lowered while many pairs are detached, and given back when they end.

package forwarder

import (
	"fmt"
	"strings"
	"testing"
	"unsafe"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/internal/testenv"
)

// fakeGC stands for debug.SetGCPercent: it records the GOGC set.
type fakeGC struct{ percent int }

func (f *fakeGC) set(p int) int { old := f.percent; f.percent = p; return old }

func newTestGC(tb testing.TB, base int, m config.Memory) (*detachedGC, *fakeGC) {
	tb.Helper()
	f := &fakeGC{percent: base}
	g := &detachedGC{setGCPct: f.set}
	g.configure(m)
	return g, f
}

// TestDetachedGCLowersAndRestores: past memory.detached_pairs detached
// pairs GOGC is memory.detached_gc_percent; below half the count it is
// the process's own again.
func TestDetachedGCLowersAndRestores(t *testing.T) {
	g, f := newTestGC(t, 100, config.Memory{DetachedGCPercent: 25, DetachedPairs: 10})
	g.add(9)
	if f.percent != 100 {
		t.Fatalf("9 detached pairs of 10: GOGC %d, want 100", f.percent)
	}
	g.add(1)
	if f.percent != 25 {
		t.Fatalf("10 detached pairs: GOGC %d, want 25", f.percent)
	}
	g.add(-5)
	if f.percent != 25 {
		t.Fatalf("5 detached pairs, half the count: GOGC %d, want still 25", f.percent)
	}
	g.add(-1)
	if f.percent != 100 {
		t.Fatalf("4 detached pairs: GOGC %d, want the process's 100 back", f.percent)
	}
}

// TestDetachedGCOnlyLowers: a process started with less headroom, or
// with the collector off, keeps it; 0 turns the lowering off, also on a
// reload while lowered.
func TestDetachedGCOnlyLowers(t *testing.T) {
	for _, base := range []int{10, -1} {
		g, f := newTestGC(t, base, config.Memory{DetachedGCPercent: 25, DetachedPairs: 1})
		g.add(3)
		if f.percent != base {
			t.Errorf("GOGC %d at start, pairs detached: %d, want %d", base, f.percent, base)
		}
	}
	g, f := newTestGC(t, 100, config.Memory{DetachedGCPercent: 0, DetachedPairs: 1})
	g.add(3)
	if f.percent != 100 {
		t.Errorf("detached_gc_percent 0: GOGC %d, want 100", f.percent)
	}
	g.configure(config.Memory{DetachedGCPercent: 50, DetachedPairs: 1})
	if f.percent != 50 {
		t.Errorf("reloaded with detached_gc_percent 50: GOGC %d, want 50", f.percent)
	}
	g.configure(config.Memory{DetachedGCPercent: 40, DetachedPairs: 1})
	if f.percent != 40 {
		t.Errorf("reloaded with detached_gc_percent 40: GOGC %d, want 40", f.percent)
	}
	g.configure(config.Memory{DetachedGCPercent: 0, DetachedPairs: 1})
	if f.percent != 100 {
		t.Errorf("reloaded with detached_gc_percent 0: GOGC %d, want 100 back", f.percent)
	}
}

// TestSessionRecordSize keeps the forwarder's session of a pair, which a
// detached pair keeps for its life, within 128 bytes: with 100,000 idle
// pairs spliced, every word costs the process 800 KB.
func TestSessionRecordSize(t *testing.T) {
	if n := unsafe.Sizeof(session{}); n > 128 {
		t.Errorf("a pair's session takes %d bytes: want at most 128", n)
	}
}

// TestPromotedNoteShared: what /flows says of a promoted pair is the
// listener's, made once: a string per pair would be kept for the life of
// every pair promoted to ip and detached.
func TestPromotedNoteShared(t *testing.T) {
	testenv.RequireRoot(t) // auto promotes to ip
	cfg := config.Default()
	cfg.Engines.Sockmap.Enabled = false
	cfg.Engines.IP.MaxPairs, cfg.Engines.IP.PinDir = 1024, config.PinDirOff
	f, err := New(&cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.closeEngines)
	lc := config.DefaultListener()
	lc.Name, lc.Listen = "auto", "127.0.0.1:0"
	lc.Upstream = []config.PoolServer{{Address: "127.0.0.1:1", Weight: 1}}
	l, err := newListener(f, lc)
	if err != nil {
		t.Fatal(err)
	}
	if l.entry == nil {
		t.Fatal("the listener promotes no pair")
	}
	s := &session{l: l}
	at := engine.Promotion{Bytes: l.promote.Bytes, After: l.promote.After}
	moved := engine.Result{Moved: [2]int64{at.Bytes, 0}}
	for _, r := range []engine.Result{{}, moved} {
		if note := s.promotedNote(r, at); !strings.HasPrefix(note, "promoted from copy: ") {
			t.Errorf("promoted pair's note %q, want promoted from copy: ...", note)
		}
		if n := testing.AllocsPerRun(10, func() { s.promotedNote(r, at) }); n != 0 {
			t.Errorf("%.0f allocations per promoted pair's note: want none", n)
		}
	}
}

// TestAtEndRunsEachInOrder: the functions a proxy hands AtEnd run once
// each, in the order given, though the session keeps one func.
func TestAtEndRunsEachInOrder(t *testing.T) {
	var s session
	var got []int
	for i := range 3 {
		s.AtEnd(func() { got = append(got, i) })
	}
	s.atEnd()
	if fmt.Sprint(got) != "[0 1 2]" {
		t.Fatalf("ran %v, want [0 1 2]", got)
	}
}
