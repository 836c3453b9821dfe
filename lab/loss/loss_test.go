// Tests for the loss program, run on synthetic packets with Program.Run so that no interface is needed.

package loss

import (
	"testing"

	"github.com/cilium/ebpf"

	"github.com/splicer/splicer/internal/testenv"
)

// Verdicts the program returns (TCX_NEXT, TCX_DROP).
const (
	verdictNext = 0xffffffff // -1 as the u32 that Program.Run reports
	verdictDrop = 2
)

func TestVerdictFollowsPercent(t *testing.T) {
	for _, tc := range []struct {
		percent float64
		verdict uint32
	}{
		{0, verdictNext},
		{100, verdictDrop},
	} {
		p := newProgram(t, tc.percent)
		const runs = 1000
		got := run(t, p, runs)
		if got != tc.verdict {
			t.Errorf("at %v%% verdict = %#x, want %#x", tc.percent, got, tc.verdict)
		}
		stats := mustStats(t, p)
		want := Stats{Passed: runs}
		if tc.percent == 100 {
			want = Stats{Dropped: runs}
		}
		if stats != want {
			t.Errorf("at %v%% stats = %+v, want %+v", tc.percent, stats, want)
		}
	}
}

func TestDropsRoughlyThePercentAsked(t *testing.T) {
	p := newProgram(t, 0)
	if err := p.SetPercent(30); err != nil {
		t.Fatal(err)
	}
	const runs = 20000
	run(t, p, runs)
	stats := mustStats(t, p)
	if stats.Total() != runs {
		t.Fatalf("counters add up to %d, want %d (%+v)", stats.Total(), runs, stats)
	}
	// 20000 draws at p=0.3 have a standard deviation of about 0.3%; 25..35% is a
	// band a correct program leaves only by a miracle.
	if share := float64(stats.Dropped) / runs; share < 0.25 || share > 0.35 {
		t.Errorf("dropped %.1f%%, want about 30%%", share*100)
	}
}

func TestRejectsPercentOutOfRange(t *testing.T) {
	for _, percent := range []float64{-1, 100.5} {
		if _, err := dropBelow(percent); err == nil {
			t.Errorf("dropBelow(%v) succeeded, want an error", percent)
		}
	}
	if got, _ := dropBelow(100); got != 1<<32 {
		t.Errorf("dropBelow(100) = %d, want 1<<32 so that every draw drops", got)
	}
}

func newProgram(tb testing.TB, percent float64) *Program {
	tb.Helper()
	testenv.RequireRoot(tb)
	p, err := New(percent)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { p.Close() })
	return p
}

// run feeds the program a minimal Ethernet+IPv4 frame runs times and returns
// the last verdict.
func run(tb testing.TB, p *Program, runs uint32) uint32 {
	tb.Helper()
	frame := make([]byte, 14+20)
	frame[12], frame[13] = 0x08, 0x00 // IPv4
	frame[14] = 0x45
	ret, err := p.objs.RandomLoss.Run(&ebpf.RunOptions{Data: frame, Repeat: runs})
	if err != nil {
		tb.Fatalf("run loss program: %v", err)
	}
	return ret
}

func mustStats(tb testing.TB, p *Program) Stats {
	tb.Helper()
	s, err := p.Stats()
	if err != nil {
		tb.Fatal(err)
	}
	return s
}
