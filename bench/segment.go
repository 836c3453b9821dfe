// The segment experiment (seed 001 Table II): request/response of 1- and 1460-byte messages over one connection.
package bench

import (
	"context"
	"fmt"
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
	failed := map[string]bool{}
	p := newProgress(s.Progress, "segment", s.Runs*len(targets)*len(segmentSizes))
	for run := 0; run < s.Runs; run++ {
		for _, t := range targets {
			for _, size := range segmentSizes {
				p.step(fmt.Sprintf("run %d %s rr%d", run+1, t.Name, size))
				if failed[t.Name] {
					continue
				}
				r, err := e.RR(ctx, t, size, s.Duration)
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				if err != nil {
					failed[t.Name] = true
					res.Unavailable = append(res.Unavailable, Missing{t.Name, "failed: " + err.Error()})
					continue
				}
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
	addSpeedups(smp, targets, s.Runs)
	var ok []string
	for _, t := range targets {
		if !failed[t.Name] {
			ok = append(ok, t.Name)
		}
	}
	res.Rows = smp.rows(ok)
	res.Notes = append(res.Notes,
		fmt.Sprintf("%d run(s) of %v per target and size, targets interleaved; one connection, TCP_NODELAY; cells are median (min–max)", s.Runs, s.Duration),
		"speedup: transactions/s over copy's in the same repetition",
		"cpu_us_per_txn: every CPU's busy time (user, system, irq, softirq) per transaction, load generator and origin included; proc_cpu_us_per_txn: the forwarder processes' own user+system time (none for route: no process forwards)")
	return res, nil
}

// addSpeedups adds each target's transactions/s over copy's, paired by
// repetition so that the two were measured moments apart.
func addSpeedups(smp *samples, targets []*Target, runs int) {
	for _, size := range segmentSizes {
		metric := fmt.Sprintf("rr%d_tps", size)
		base := smp.get("copy", metric)
		if len(base) != runs {
			continue
		}
		for _, t := range targets {
			v := smp.get(t.Name, metric)
			if len(v) != runs {
				continue
			}
			for i := range v {
				smp.add(t.Name, fmt.Sprintf("rr%d_speedup", size), "x", v[i]/base[i])
			}
		}
	}
}
