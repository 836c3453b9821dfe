// The segment experiment (seed 001 Table II): request/response of 1- and 1460-byte messages over one connection, and sockperf's ping-pong beside it.

package bench

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// segmentSizes are the message sizes of Table II: one byte, one full segment.
var segmentSizes = []int{1, 1460}

// Segment ping-pongs 1-byte and 1460-byte messages through every target
// over one connection and reports transactions per second, CPU per
// transaction and the speedup in transactions per second against copy;
// then, where sockperf is installed, sockperf's round trips of 14- and
// 1460-byte messages through the same target.
func Segment(ctx context.Context, e *Env, s Settings) (*Result, error) {
	res := &Result{Experiment: "segment", Unavailable: e.missing()}
	targets := e.Available()
	smp := newSamples()
	tps := map[string]map[int]float64{} // by metric+target, then run: for paired speedups
	spErr := e.startSockperf(ctx)
	steps := len(segmentSizes)
	if spErr == nil {
		steps += len(sockperfSizes)
	}
	flows := newCarriage()   // of the request/response runs
	spFlows := newCarriage() // of the sockperf runs
	p := newProgress(s.Progress, "segment", s.Runs*len(targets)*steps)
	for run := 0; run < s.Runs; run++ {
		for _, t := range targets {
			for _, size := range segmentSizes {
				p.step(fmt.Sprintf("run %d %s rr%d", run+1, t.Name, size))
				r, err := e.RR(ctx, t, size, s.Duration)
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				if err != nil {
					// A failed run loses its row's sample, not the target.
					res.Notes = append(res.Notes, fmt.Sprintf("run %d %s: %v", run+1, t.Name, err))
					continue
				}
				if note, ok := addRR(smp, tps, flows, t, run, size, r); !ok {
					res.Notes = append(res.Notes, note)
				}
			}
			if spErr == nil {
				res.Notes = append(res.Notes, e.segmentSockperf(ctx, t, run, s.Duration, p, smp, spFlows)...)
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
			}
		}
	}
	p.finish()
	addSpeedups(smp, targets, s.Runs, tps)
	res.Rows = smp.rows(names(targets))
	res.Unavailable = append(res.Unavailable, unmeasured(targets, res.Rows)...)
	res.Notes = append(res.Notes,
		fmt.Sprintf("%d run(s) of %v per target and size, targets interleaved; one connection, TCP_NODELAY; cells are median (min–max)", s.Runs, s.Duration),
		"speedup: transactions/s over copy's in the same repetition",
		"cpu_us_per_txn: every CPU's busy time (user, system, irq, softirq) per transaction, load generator and origin included; proc_cpu_us_per_txn: the forwarder processes' own user+system time (none for route: no process forwards)")
	res.Notes = append(res.Notes, engineNotes(targets, flows.seen)...)
	res.Notes = append(res.Notes, flows.leftNotes("rr*, cpu_us_per_txn*, speedups")...)
	res.Notes = append(res.Notes, sockperfNotes(spErr, s.Duration, targets, spFlows)...)
	return res, nil
}

// addRR adds r, run's request/response run of size-byte messages through
// t, to smp and to tps (for the speedups) if it counts (c: through an
// engine, /flows showed its pair spliced by it); else it returns the note
// saying why it was left out.
func addRR(smp *samples, tps map[string]map[int]float64, c *carriage, t *Target, run, size int, r RRRun) (note string, ok bool) {
	if note, ok := c.carried(t, run, fmt.Sprintf("rr%d", size), r.SplicedBy); !ok {
		return note, false
	}
	key := fmt.Sprintf("rr%d_tps/%s", size, t.Name)
	if tps[key] == nil {
		tps[key] = map[int]float64{}
	}
	tps[key][run] = r.TPS
	suffix := ""
	if size != 1 {
		suffix = fmt.Sprintf("_%d", size)
	}
	smp.add(t.Name, fmt.Sprintf("rr%d_tps", size), "txn/s", r.TPS)
	smp.add(t.Name, "cpu_us_per_txn"+suffix, "µs", r.MachineUSPerTxn)
	if len(t.Pids()) > 0 {
		smp.add(t.Name, "proc_cpu_us_per_txn"+suffix, "µs", r.ProcUSPerTxn)
	}
	return "", true
}

// segmentSockperf runs sockperf's ping-pongs of one repetition through t
// and adds their samples; it returns a note for each failed run (toolRun:
// through an engine, a run counts only if /flows showed its pair spliced
// by that engine).
func (e *Env) segmentSockperf(ctx context.Context, t *Target, run int, dur time.Duration, p *progress, smp *samples, c *carriage) []string {
	runs := make([]SockperfRun, len(sockperfSizes))
	whats := make([]string, len(sockperfSizes))
	for i, size := range sockperfSizes {
		whats[i] = fmt.Sprintf("sockperf%d", size)
	}
	return e.toolRuns(ctx, t, Sockperf, run, p, c, whats,
		func(i int) (err error) {
			runs[i], err = e.Sockperf(ctx, t, sockperfSizes[i], dur)
			return err
		},
		func(i int) {
			smp.addBy("sockperf", t.Name, whats[i]+"_avg_us", "µs RTT", runs[i].AvgUS)
			smp.addBy("sockperf", t.Name, whats[i]+"_p99_us", "µs RTT", runs[i].P99US)
		})
}

// sockperfNotes say how the sockperf rows were measured, or why there are
// none.
func sockperfNotes(spErr error, dur time.Duration, targets []*Target, c *carriage) []string {
	if spErr != nil {
		return []string{fmt.Sprintf("sockperf14_*, sockperf1460_*: n/a, %v", spErr)}
	}
	return toolNotes("sockperf", targets, c,
		fmt.Sprintf("sockperf14_*, sockperf1460_* (tool sockperf): `sockperf pp --tcp -m SIZE -t %d --full-rtt` in the client namespace through the target to `sockperf sr --tcp` in the server namespace, one connection, one message in flight, TCP_NODELAY (sockperf's default), 400 ms warm-up not counted; avg is sockperf's avg-rtt, p99 its 99.000 percentile, both full round trips in µs (not sockperf's default half round trip); 14 bytes is sockperf's smallest message (its header)", sockperfSeconds(dur)),
		"sockperf vs rr*: rr1_tps and rr1460_tps come from loadgen, a Go closed loop against the origin's echo sharing the CPUs with the forwarder; sockperf is a C client and server, so its client and server cost less per message: compare targets within one tool, not sockperf's latency with 1/rr_tps")
}

// addSpeedups adds each target's transactions/s over copy's, paired by
// repetition so that the two were measured moments apart; a repetition in
// which either failed is left out.
func addSpeedups(smp *samples, targets []*Target, runs int, tps map[string]map[int]float64) {
	for _, size := range segmentSizes {
		metric := fmt.Sprintf("rr%d_tps", size)
		base := tps[metric+"/copy"]
		for _, t := range targets {
			v := tps[metric+"/"+t.Name]
			for run := 0; run < runs; run++ {
				b, okb := base[run]
				x, okx := v[run]
				if okb && okx {
					smp.add(t.Name, fmt.Sprintf("rr%d_speedup", size), "x", x/b)
				}
			}
		}
	}
}

// unmeasured lists the targets that have no row because every run failed.
func unmeasured(targets []*Target, rows []Row) []Missing {
	var m []Missing
	for _, t := range targets {
		if !slices.ContainsFunc(rows, func(r Row) bool { return r.Engine == t.Name }) {
			m = append(m, Missing{t.Name, "every run failed (see the notes)"})
		}
	}
	return m
}
