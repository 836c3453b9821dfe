// The switch experiment (seed 003): latency and throughput per object size through splicer's http-reverse per engine and HAProxy in HTTP mode.

package bench

import (
	"context"
	"fmt"

	"github.com/splicer/splicer/origin"
)

// switchConcurrency is how many keep-alive connections switch requests
// over: one, so that latency is the switch's, not a queue's.
const switchConcurrency = 1

// Switch fetches origin objects of s.SwitchSizes over one keep-alive
// connection through every engine's http-reverse listener, through HAProxy
// (with and without splice) in HTTP mode and straight from the origin by
// kernel routing (route), and reports the latency
// (median, p99) and throughput of body bytes.
func Switch(ctx context.Context, e *Env, s Settings) (*Result, error) {
	res := &Result{Experiment: "switch"}
	var targets []*Target
	for _, t := range e.Targets {
		switch {
		case t.Unavailable != "":
			res.Unavailable = append(res.Unavailable, Missing{t.Name, t.Unavailable})
		case t.switchAddr == "":
			res.Unavailable = append(res.Unavailable, Missing{t.Name, "not an HTTP switch: it forwards bytes, it does not route requests"})
		default:
			targets = append(targets, t)
		}
	}
	note, err := e.switchOriginNote(s.SwitchSizes)
	if err != nil {
		return nil, err
	}
	res.Notes = append(res.Notes, note)
	dur := pointDuration(s)
	smp := newSamples()
	seen := map[string]map[string]bool{}
	p := newProgress(s.Progress, "switch", s.Runs*len(targets)*len(s.SwitchSizes))
	for run := 0; run < s.Runs; run++ {
		for _, t := range targets {
			for _, size := range s.SwitchSizes {
				l := sizeLabel(size)
				p.step(fmt.Sprintf("run %d %s %s", run+1, t.Name, l))
				r, engines, err := e.httpPoint(ctx, t, "http://"+t.switchAddr+origin.ObjectPath(size), switchConcurrency, dur, e.Dial)
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				if err != nil {
					res.Notes = append(res.Notes, fmt.Sprintf("run %d %s %s: %v", run+1, t.Name, l, err))
					continue
				}
				if !t.Peer {
					addSeen(seen, t.Name+" switch", engines)
				}
				smp.add(t.Name, "switch_p50_ms_"+l, "ms", r.P50.Seconds()*1e3)
				smp.add(t.Name, "switch_p99_ms_"+l, "ms", r.P99.Seconds()*1e3)
				smp.add(t.Name, "switch_gbps_"+l, "Gbit/s", r.Gbps)
				if r.Errors > 0 {
					res.Notes = append(res.Notes, fmt.Sprintf("run %d %s %s: %d failed request(s), first: %v", run+1, t.Name, l, r.Errors, r.FirstErr))
				}
			}
		}
	}
	p.finish()
	res.Rows = smp.rows(names(targets))
	res.Unavailable = append(res.Unavailable, unmeasured(targets, res.Rows)...)
	res.Notes = append(res.Notes,
		fmt.Sprintf("%d run(s) of about %v per target and object size (the request count is sized from an unmeasured warm-up batch), %d keep-alive connection(s) from the client; targets interleaved; cells are median (min–max)", s.Runs, dur, switchConcurrency),
		"engines: the engine's http-reverse listener, one pool (the switch experiments' origin, named in the origin note), every response body from 512 KiB spliced with a byte limit, shorter ones copied by the proxy whatever the engine (httpcore.ReverseCopyBelow), so the engine rows differ from there; haproxy, haproxy-splice: a `mode http` frontend with keep-alive (haproxy-splice: option splice-auto) to the same origin",
		"p50_ms, p99_ms: time from sending a request to its last body byte; gbps: body bytes per second over the batch",
		"sizes are KiB and MiB (1k = 1024 bytes, 1m = 1 MiB)")
	res.Notes = append(res.Notes, seenNotes(seen)...)
	return res, nil
}
