// The demo: every engine and peer measured briefly by the field's tools (iperf3 bulk, sockperf ping-pong) with the load generator's figures beside them, as one table.

package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// DemoRow is one line of the demo table.
type DemoRow struct {
	Target string
	// Iperf3Gbps is iperf3's rate over one stream and SockperfUS
	// sockperf's average round trip of DemoSockperfSize-byte messages: the
	// headline, from tools whose own cost does not swamp a forwarder's (0
	// when the tool did not measure the row: Note says why).
	Iperf3Gbps, SockperfUS float64
	// LoadgenGbps, the CPU per GB of the same bulk transfer and
	// LoadgenTPS are the Go load generator's.
	LoadgenGbps, ProcSPerGB, MachineSPerGB, LoadgenTPS float64

	// Note says why a target or a figure is missing, or, for an engine,
	// that /flows showed every run spliced by it.
	Note string
}

// DemoRRRounds is how many 1-byte request/response runs the demo makes
// per target, the targets interleaved; the table shows their median. One
// run per target swung from 7.9k to 37.7k txn/s for the same engine from
// one demo to the next (where the scheduler put the relay beside its
// peers on two CPUs), more than the engines' differences.
const DemoRRRounds = 3

// DemoSockperfSize is the demo's sockperf message size: sockperf's
// smallest, its own header alone.
var DemoSockperfSize = sockperfSizes[0]

// DemoSettings are the durations of the demo's runs through each target.
type DemoSettings struct {
	// Bulk is the load generator's bulk transfer.
	Bulk time.Duration
	// RR is the load generator's 1-byte request/response, split into
	// DemoRRRounds runs.
	RR time.Duration
	// Tools is the least measured time of each iperf3 and sockperf run
	// (both take whole seconds, sockperf with its warm-up on top; its
	// client also waits about 2 s before it starts, which is most of the
	// demo's time per target).
	Tools time.Duration
	// Progress receives a line per step.
	Progress io.Writer
}

// DemoTable is the demo's result: a row per target, and why a tool did
// not run at all.
type DemoTable struct {
	Rows []DemoRow
	// Iperf3Err and SockperfErr say why iperf3 or sockperf measured
	// nothing (not installed, its server did not start).
	Iperf3Err, SockperfErr error
	tools                  time.Duration
}

// Demo measures every available target briefly, with unavailable targets
// as rows whose Note says why: per target a load-generator bulk transfer,
// an iperf3 run and a sockperf ping-pong, then DemoRRRounds rounds of
// load-generator 1-byte request/response through every target in turn.
// Through an engine a figure counts only if /flows showed its pairs
// spliced by that engine; the row's note says which did not.
func (e *Env) Demo(ctx context.Context, s DemoSettings) (*DemoTable, error) {
	d := &DemoTable{Rows: make([]DemoRow, len(e.Targets)), tools: s.Tools,
		Iperf3Err: e.startIperf3(ctx), SockperfErr: e.startSockperf(ctx)}
	problems := make([][]string, len(e.Targets))
	for i, t := range e.Targets {
		d.Rows[i] = DemoRow{Target: t.Name, Note: t.Unavailable}
		if t.Unavailable != "" {
			continue
		}
		fmt.Fprintf(s.Progress, "  %-15s", t.Name)
		p, err := e.demoTarget(ctx, t, s, d, &d.Rows[i])
		if err != nil {
			return nil, err
		}
		problems[i] = p
		fmt.Fprintf(s.Progress, " done\n")
	}
	rr, err := e.demoRR(ctx, s)
	if err != nil {
		return nil, err
	}
	for i, t := range e.Targets {
		if t.Unavailable != "" {
			continue
		}
		d.Rows[i].LoadgenTPS = rr.tps(t.Name)
		d.Rows[i].Note = demoNote(t, append(problems[i], rr.problems[t.Name]...))
	}
	return d, nil
}

// demoTarget measures t's bulk transfer by the load generator and by
// iperf3, and its round trips by sockperf, into row; it returns what went
// wrong with the tools' runs (a failed run or one /flows did not show
// spliced by t's engine), for the row's note.
func (e *Env) demoTarget(ctx context.Context, t *Target, s DemoSettings, d *DemoTable, row *DemoRow) ([]string, error) {
	var problems []string
	fmt.Fprintf(s.Progress, " loadgen bulk...")
	b, err := e.Bulk(ctx, t, 1, s.Bulk)
	if err != nil {
		return nil, err
	}
	if p := demoCarried(t, "loadgen bulk", b.SplicedBy); p != "" {
		problems = append(problems, p)
	} else {
		row.LoadgenGbps, row.ProcSPerGB, row.MachineSPerGB = b.Gbps, b.ProcSPerGB, b.MachineSPerGB
	}
	c := newCarriage()
	if d.Iperf3Err == nil {
		fmt.Fprintf(s.Progress, " iperf3...")
		var gbps float64
		if p := e.toolRun(ctx, t, Iperf3, 0, "iperf3", c, func() (err error) {
			gbps, err = e.Iperf3(ctx, t, 1, s.Tools)
			return err
		}); p != "" {
			problems = append(problems, p)
		} else {
			row.Iperf3Gbps = gbps
		}
	}
	if d.SockperfErr == nil {
		fmt.Fprintf(s.Progress, " sockperf...")
		var r SockperfRun
		if p := e.toolRun(ctx, t, Sockperf, 0, "sockperf", c, func() (err error) {
			r, err = e.Sockperf(ctx, t, DemoSockperfSize, s.Tools)
			return err
		}); p != "" {
			problems = append(problems, p)
		} else {
			row.SockperfUS = r.AvgUS
		}
	}
	return problems, ctx.Err()
}

// demoRRs are the load generator's request/response rounds: the rates of
// the runs that counted, by target, and what went wrong with the others.
type demoRRs struct {
	problems map[string][]string
	tpsBy    map[string][]float64
}

// tps is the median rate of target's counted runs, 0 for none.
func (r *demoRRs) tps(target string) float64 {
	v := slices.Clone(r.tpsBy[target])
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	return median(v)
}

// demoRR runs DemoRRRounds rounds of 1-byte request/response through
// every available target in turn, s.RR per target in all.
func (e *Env) demoRR(ctx context.Context, s DemoSettings) (*demoRRs, error) {
	r := &demoRRs{problems: map[string][]string{}, tpsBy: map[string][]float64{}}
	fmt.Fprintf(s.Progress, "  loadgen 1-byte request/response, %d rounds through every target:", DemoRRRounds)
	for round := range DemoRRRounds {
		fmt.Fprintf(s.Progress, " %d", round+1)
		for _, t := range e.Available() {
			run, err := e.RR(ctx, t, 1, s.RR/DemoRRRounds)
			if err != nil {
				return nil, err
			}
			if p := demoCarried(t, fmt.Sprintf("loadgen rr round %d", round+1), run.SplicedBy); p != "" {
				r.problems[t.Name] = append(r.problems[t.Name], p)
				continue
			}
			r.tpsBy[t.Name] = append(r.tpsBy[t.Name], run.TPS)
		}
	}
	fmt.Fprintf(s.Progress, " done\n")
	return r, nil
}

// demoCarried is "" if a load generator's run through t counts (through
// an engine: /flows showed every pair spliced by it), else why not.
func demoCarried(t *Target, what string, splicedBy []string) string {
	note, _ := newCarriage().carried(t, 0, what, splicedBy)
	return note
}

// demoNote is a row's note: through an engine, that /flows showed every
// run spliced by it, or what went wrong; through a peer, only what went
// wrong.
func demoNote(t *Target, problems []string) string {
	if len(problems) > 0 {
		return strings.Join(problems, "; ")
	}
	if t.Peer {
		return ""
	}
	return "spliced by " + t.Name + " (/flows)"
}

// WriteTable prints the rows as a Markdown table: the tools' columns
// first, then the load generator's, labelled.
func (d *DemoTable) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "| forwarder | iperf3 Gbit/s (1 stream) | sockperf RTT µs (%d B, avg) | loadgen Gbit/s (1 conn) | loadgen 1-byte txn/s | forwarder CPU s/GB | machine CPU s/GB | note |\n", DemoSockperfSize)
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---|")
	for _, r := range d.Rows {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", r.Target,
			demoCell("%.2f", r.Iperf3Gbps), demoCell("%.1f", r.SockperfUS),
			demoCell("%.2f", r.LoadgenGbps), demoCell("%.0f", r.LoadgenTPS),
			demoCell("%.3f", r.ProcSPerGB, r.LoadgenGbps), demoCell("%.3f", r.MachineSPerGB, r.LoadgenGbps),
			cellText(r.Note))
	}
}

// demoCell formats v, or "n/a" when v (or, for a figure derived from
// another, that one: measuredBy) was not measured. A forwarder CPU of 0 is
// a figure (route: no process forwards), its bulk rate decides.
func demoCell(format string, v float64, measuredBy ...float64) string {
	if len(measuredBy) > 0 {
		if measuredBy[0] <= 0 {
			return "n/a"
		}
	} else if v <= 0 {
		return "n/a"
	}
	return fmt.Sprintf(format, v)
}

// cellText keeps a note on one table row: no line breaks, no cell breaks.
func cellText(s string) string {
	return strings.ReplaceAll(strings.Join(strings.Fields(s), " "), "|", "/")
}

// WriteNotes prints the lines under the table: what each tool ran and
// what each column means, or why a tool measured nothing.
func (d *DemoTable) WriteNotes(w io.Writer) {
	if d.Iperf3Err != nil {
		fmt.Fprintf(w, "iperf3: n/a, %v\n", d.Iperf3Err)
	} else {
		fmt.Fprintf(w, "iperf3: `iperf3 -c HOST -P 1 -t %d` client to server, the rate the server received.\n", iperf3Seconds(d.tools))
	}
	if d.SockperfErr != nil {
		fmt.Fprintf(w, "sockperf: n/a, %v\n", d.SockperfErr)
	} else {
		fmt.Fprintf(w, "sockperf: `sockperf pp --tcp -m %d -t %d --full-rtt`, the average round trip (after its 400 ms warm-up).\n", DemoSockperfSize, sockperfSeconds(d.tools))
	}
	fmt.Fprintf(w, "loadgen: splicer's Go load generator, one connection; txn/s the median of %d runs interleaved across the\n"+
		"targets. On few CPUs its own wake-ups add to every hop through a user-space forwarder: compare rows by the tools.\n"+
		"forwarder CPU: the forwarding processes' user+system time; machine CPU: all CPUs' busy time incl. softirq,\n"+
		"load generator and origin included (same work for every row); both over the loadgen bulk transfer.\n", DemoRRRounds)
}
