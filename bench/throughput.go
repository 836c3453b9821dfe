// The throughput experiment (seed 001 Table III): bulk transfer over 1, 2, 3 and 8 connections, and iperf3's over 1 and 8 streams beside it.

package bench

import (
	"context"
	"fmt"
	"slices"
)

// throughputConns are the connection counts of the throughput experiment.
var throughputConns = []int{1, 2, 3, 8}

// Throughput pushes bulk data from the client to the origin's sink through
// every target over 1, 2, 3 and 8 connections and reports Gbit/s, and CPU
// seconds per GB over all four runs of a repetition; then, where iperf3 is
// installed, iperf3's rate over 1 and 8 streams through the same target.
// The targets include auto, a tcp listener with no engine, whose note
// says which engine carried its pairs at the end: the check that
// promotion works.
func Throughput(ctx context.Context, e *Env, s Settings) (*Result, error) {
	res := &Result{Experiment: "throughput", Unavailable: e.missing()}
	targets := e.throughputTargets(res)
	autoBy := newCarriers() // of the runs through auto
	smp := newSamples()
	flows := newCarriage() // of the bulk runs
	ipErr := e.startIperf3(ctx)
	steps := len(throughputConns)
	if ipErr == nil {
		steps += len(iperf3Conns)
	}
	ipFlows := newCarriage() // of the iperf3 runs
	p := newProgress(s.Progress, "throughput", s.Runs*len(targets)*steps)
	for run := 0; run < s.Runs; run++ {
		for _, t := range targets {
			var gb, machine, proc float64
			complete := true
			for _, n := range throughputConns {
				p.step(fmt.Sprintf("run %d %s %d conn", run+1, t.Name, n))
				var b BulkRun
				err := e.tallied(ctx, t, Sink, fmt.Sprintf("gbps_%dconn", n), autoBy, func() (err error) {
					b, err = e.Bulk(ctx, t, n, s.Duration)
					return err
				})
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				if err != nil {
					// A failed run loses its sample, not the target.
					complete = false
					res.Notes = append(res.Notes, fmt.Sprintf("run %d %s, %d conn: %v", run+1, t.Name, n, err))
					continue
				}
				if note, ok := addBulk(smp, flows, t, run, n, b); !ok {
					complete = false
					res.Notes = append(res.Notes, note)
					continue
				}
				g := float64(b.Bytes) / 1e9
				gb, machine, proc = gb+g, machine+b.MachineSPerGB*g, proc+b.ProcSPerGB*g
			}
			// CPU per GB is over a repetition's four runs, so a repetition
			// with a failed run has none.
			if complete && gb > 0 {
				smp.add(t.Name, "cpu_s_per_gb", "s/GB", machine/gb)
				if len(t.Pids()) > 0 {
					smp.add(t.Name, "proc_cpu_s_per_gb", "s/GB", proc/gb)
				}
			}
			if ipErr == nil {
				res.Notes = append(res.Notes, e.throughputIperf3(ctx, t, run, s.Duration, p, smp, ipFlows, autoBy)...)
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
			}
		}
	}
	p.finish()
	res.Rows = smp.rows(names(targets))
	res.Unavailable = append(res.Unavailable, unmeasured(targets, res.Rows)...)
	res.Notes = append(res.Notes,
		fmt.Sprintf("%d run(s) of %v per target and connection count after a 200ms warm-up, targets interleaved; client -> origin sink; cells are median (min–max)", s.Runs, s.Duration),
		"cpu_s_per_gb: every CPU's busy time (user, system, irq, softirq) per GB over the four runs of a repetition, load generator and origin included; proc_cpu_s_per_gb: the forwarder processes' own user+system time (none for route: no process forwards)")
	res.Notes = append(res.Notes, engineNotes(targets, flows.seen)...)
	res.Notes = append(res.Notes, flows.leftNotes("gbps_*, cpu_s_per_gb")...)
	res.Notes = append(res.Notes, iperf3Notes(ipErr, s.Duration, targets, ipFlows)...)
	if n := autoBy.note("auto"); n != "" {
		res.Notes = append(res.Notes, n)
	}
	return res, nil
}

// throughputTargets are the targets that can run here with auto, a tcp
// listener as a user's default one is, after splicer's engines; where it
// cannot run, res lists it unavailable.
func (e *Env) throughputTargets(res *Result) []*Target {
	targets := e.Available()
	if e.Auto == nil {
		res.Unavailable = append(res.Unavailable, Missing{Engine: "auto", Reason: "engine ip cannot run here (auto is then pipe, which has its own rows)"})
		return targets
	}
	last := -1
	for i, t := range targets {
		if !t.Peer {
			last = i
		}
	}
	return slices.Insert(targets, last+1, e.Auto)
}

// addBulk adds b, run's bulk transfer through t over conns connections, to
// smp if it counts (c: through an engine, /flows showed every pair spliced
// by it); else it returns the note saying why it was left out.
func addBulk(smp *samples, c *carriage, t *Target, run, conns int, b BulkRun) (note string, ok bool) {
	if note, ok := c.carried(t, run, fmt.Sprintf("%d conn", conns), b.SplicedBy); !ok {
		return note, false
	}
	smp.add(t.Name, fmt.Sprintf("gbps_%dconn", conns), "Gbit/s", b.Gbps)
	return "", true
}

// engineNotes say which engine /flows showed for each engine target.
func engineNotes(targets []*Target, seen map[string]string) []string {
	var confirmed, notes []string
	for _, t := range targets {
		if t.Peer || t.Auto {
			continue
		}
		switch got := seen[t.Name]; {
		case got == t.Name:
			confirmed = append(confirmed, t.Name)
		case got == "":
			notes = append(notes, t.Name+": the engine was not confirmed in /flows (the pairs were not seen spliced)")
		default:
			notes = append(notes, fmt.Sprintf("%s: pairs fell back to %s (per /flows)", t.Name, got))
		}
	}
	if len(confirmed) > 0 {
		slices.Sort(confirmed)
		notes = append(notes, fmt.Sprintf("/flows showed the pairs spliced by the engine named in the row for: %v", confirmed))
	}
	return notes
}
