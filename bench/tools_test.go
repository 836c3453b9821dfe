// Tests of carriage: a run through an engine counts only where /flows showed every pair spliced by that engine; the others leave no sample in the rows, and are counted.

package bench

import (
	"bytes"
	"strings"
	"testing"
)

func TestCarried(t *testing.T) {
	pipe, route := &Target{Name: "pipe"}, &Target{Name: "route", Peer: true}
	for _, c := range []struct {
		t         *Target
		splicedBy []string
		want      bool
	}{
		{pipe, []string{"pipe", "pipe"}, true},
		{pipe, []string{"pipe", "copy"}, false}, // one pair fell back
		{pipe, []string{"pipe", ""}, false},     // one pair never seen spliced
		{pipe, nil, false},                      // no pair seen at all
		{route, nil, true},                      // a peer has no /flows
	} {
		c0 := newCarriage()
		note, ok := c0.carried(c.t, 0, "rr1", c.splicedBy)
		if ok != c.want || (note == "") != ok || c0.left != map[bool]int{true: 0, false: 1}[ok] {
			t.Errorf("carried(%s, %q) = %q, %v with %d left out; want %v", c.t.Name, c.splicedBy, note, ok, c0.left, c.want)
		}
	}
}

// TestSegmentLeavesOutUncarriedRuns: of pipe's two request/response runs
// one was carried by copy (a fallback); ip's only run was never seen
// spliced. pipe's row holds one run, ip has no row (nor speedup) and is
// listed as unmeasured, and the headline shows ip's 1-byte txn/s as n/a.
func TestSegmentLeavesOutUncarriedRuns(t *testing.T) {
	copyT, pipe, ip := &Target{Name: "copy"}, &Target{Name: "pipe"}, &Target{Name: "ip"}
	targets := []*Target{copyT, pipe, ip}
	smp, tps, c := newSamples(), map[string]map[int]float64{}, newCarriage()
	var notes []string
	for _, r := range []struct {
		t   *Target
		run int
		rr  RRRun
	}{
		{copyT, 0, RRRun{TPS: 100, SplicedBy: []string{"copy"}}},
		{copyT, 1, RRRun{TPS: 100, SplicedBy: []string{"copy"}}},
		{pipe, 0, RRRun{TPS: 300, SplicedBy: []string{"pipe"}}},
		{pipe, 1, RRRun{TPS: 100, SplicedBy: []string{"copy"}}},
		{ip, 0, RRRun{TPS: 900, SplicedBy: []string{""}}},
	} {
		if note, ok := addRR(smp, tps, c, r.t, r.run, 1, r.rr); !ok {
			notes = append(notes, note)
		}
	}
	addSpeedups(smp, targets, 2, tps)
	rows := smp.rows(names(targets))
	res := &Result{Experiment: "segment", Rows: rows, Unavailable: unmeasured(targets, rows)}

	if row, ok := res.Row("pipe", "rr1_tps"); !ok || row.Runs != 1 || row.Value != 300 {
		t.Errorf("pipe's rr1_tps = %+v, want the one run pipe carried (300)", row)
	}
	if row, ok := res.Row("pipe", "rr1_speedup"); !ok || row.Runs != 1 || row.Value != 3 {
		t.Errorf("pipe's rr1_speedup = %+v, want one run of 3x", row)
	}
	for _, m := range []string{"rr1_tps", "rr1_speedup", "cpu_us_per_txn"} {
		if row, ok := res.Row("ip", m); ok {
			t.Errorf("ip has a %s row %+v from a run /flows never showed it carrying", m, row)
		}
	}
	if len(res.Unavailable) != 1 || res.Unavailable[0].Engine != "ip" {
		t.Errorf("unmeasured = %+v, want ip", res.Unavailable)
	}
	if c.left != 2 || len(notes) != 2 || !strings.Contains(notes[0], "run 2 pipe rr1") || !strings.Contains(notes[1], "run 1 ip rr1") {
		t.Errorf("%d left out, notes %q; want pipe's run 2 and ip's run 1", c.left, notes)
	}
	if ln := c.leftNotes("rr*"); len(ln) != 1 || !strings.Contains(ln[0], "2 run(s)") {
		t.Errorf("left-out notes %q, want one counting 2 runs", ln)
	}
	if en := strings.Join(engineNotes(targets, c.seen), "\n"); !strings.Contains(en, "ip: the engine was not confirmed") || !strings.Contains(en, "[copy pipe]") {
		t.Errorf("engine notes %q: want ip unconfirmed, copy and pipe confirmed", en)
	}
	var out bytes.Buffer
	throughput := &Result{Experiment: "throughput", Rows: []Row{{Engine: "ip", Metric: "gbps_1conn", Value: 1}}}
	WriteHeadline(&out, []*Result{res, throughput})
	if line := headlineLine(t, out.String(), "ip"); !strings.HasPrefix(line, "| ip | n/a |") {
		t.Errorf("headline line of ip %q: want n/a for its 1-byte txn/s", line)
	}
}

// TestThroughputLeavesOutUncarriedRuns: a bulk run whose pairs /flows
// showed spliced by another engine leaves no sample.
func TestThroughputLeavesOutUncarriedRuns(t *testing.T) {
	sockmap := &Target{Name: "sockmap"}
	smp, c := newSamples(), newCarriage()
	if _, ok := addBulk(smp, c, sockmap, 0, 1, BulkRun{Gbps: 20, SplicedBy: []string{"sockmap"}}); !ok {
		t.Fatal("a run sockmap carried was left out")
	}
	if note, ok := addBulk(smp, c, sockmap, 1, 8, BulkRun{Gbps: 40, SplicedBy: []string{"sockmap", "pipe", "sockmap"}}); ok || !strings.Contains(note, "run 2 sockmap 8 conn") {
		t.Fatalf("a run with a pair pipe carried: counted %v, note %q", ok, note)
	}
	if got := smp.get("sockmap", "gbps_8conn"); len(got) != 0 {
		t.Errorf("gbps_8conn of sockmap = %v, want no sample", got)
	}
	if got := smp.get("sockmap", "gbps_1conn"); len(got) != 1 || c.left != 1 {
		t.Errorf("gbps_1conn of sockmap = %v with %d left out, want one sample and one left out", got, c.left)
	}
}

// headlineLine returns the headline table's line for target.
func headlineLine(tb testing.TB, out, target string) string {
	tb.Helper()
	for line := range strings.SplitSeq(out, "\n") {
		if strings.HasPrefix(line, "| "+target+" |") {
			return line
		}
	}
	tb.Fatalf("no headline line for %s in %q", target, out)
	return ""
}
