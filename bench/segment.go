// The segment experiment (seed 001 Table II): request/response of 1- and 1460-byte messages over one connection.

package bench

import (
	"context"
	"fmt"
	"slices"
)

// segmentSizes are the message sizes of Table II: one byte, one full segment.
var segmentSizes = []int{1, 1460}

// Segment ping-pongs 1-byte and 1460-byte messages through every target
// over one connection and reports transactions per second, CPU per
// transaction and the speedup in transactions per second against copy.
func Segment(ctx context.Context, e *Env, s Settings) (*Result, error) {
	res := &Result{Experiment: "segment", Unavailable: e.missing()}
	targets := e.Available()
	smp := newSamples()
	tps := map[string]map[int]float64{} // by metric+target, then run: for paired speedups
	p := newProgress(s.Progress, "segment", s.Runs*len(targets)*len(segmentSizes))
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
	return res, nil
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
