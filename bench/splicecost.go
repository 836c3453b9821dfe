// The splice-cost experiment (seed 001 §V-B3, Fig. 10): time to splice idle pairs, and throughput across a splice under load.

package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/splicer/splicer/engine"
	"github.com/splicer/splicer/engine/all"
	"github.com/splicer/splicer/internal/sockopt"
	"github.com/splicer/splicer/loadgen"
)

// spliceTimeout bounds the wait for one pair's OnSpliced: an engine that
// does not get there in this long is reported as failed, not waited for.
const spliceTimeout = 5 * time.Second

// traceInterval is the sampling interval of the throughput traces.
const traceInterval = 50 * time.Millisecond

// SpliceCost splices s.Pairs idle pairs one after another with each engine
// this host can run, in this process and the forwarder's namespace, and
// reports the time from calling Splice to the engine's OnSpliced (median
// and p99); then traces throughput over time through each engine's late
// listener, which splices a second into a bulk transfer.
func SpliceCost(ctx context.Context, e *Env, s Settings) (*Result, error) {
	res := &Result{Experiment: "splice-cost"}
	for _, t := range e.Targets {
		if t.Peer {
			res.Unavailable = append(res.Unavailable, Missing{t.Name, "a peer has no splice step"})
		} else if t.Unavailable != "" {
			res.Unavailable = append(res.Unavailable, Missing{t.Name, t.Unavailable})
		}
	}
	if e.Lab == nil {
		res.Notes = append(res.Notes, "splice cost needs the lab (root): not measured")
		return res, nil
	}
	set, err := buildEnginesIn(e)
	if err != nil {
		return nil, err
	}
	defer set.Close()
	var engines []engine.Engine
	for _, t := range e.Available() {
		if t.Peer {
			continue
		}
		i := slices.IndexFunc(set.Engines, func(en engine.Engine) bool { return en.Name() == t.Name })
		if i < 0 {
			res.Unavailable = append(res.Unavailable, Missing{t.Name, "could not build in-process: " + set.Reason(t.Name)})
			continue
		}
		engines = append(engines, set.Engines[i])
	}

	smp := newSamples()
	failed := map[string]bool{}
	p := newProgress(s.Progress, "splice-cost", s.Runs*len(engines)+len(engines))
	for run := 0; run < s.Runs; run++ {
		for _, en := range engines {
			p.step(fmt.Sprintf("run %d %s: splicing %d idle pairs", run+1, en.Name(), s.Pairs))
			if failed[en.Name()] {
				continue
			}
			costs, err := e.spliceIdlePairs(ctx, en, s.Pairs)
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if err != nil {
				failed[en.Name()] = true
				res.Unavailable = append(res.Unavailable, Missing{en.Name(), failedInRun(run, err)})
				continue
			}
			slices.Sort(costs)
			smp.add(en.Name(), "splice_us_p50", "µs", percentile(costs, 0.5))
			smp.add(en.Name(), "splice_us_p99", "µs", percentile(costs, 0.99))
			if note, err := e.addUnspliceCost(ctx, smp, en, s.Pairs); err != nil {
				res.Notes = append(res.Notes, fmt.Sprintf("%s: %v", en.Name(), err))
			} else if note != "" {
				res.Notes = append(res.Notes, note)
			}
		}
	}
	var traced []string
	for _, t := range e.Available() {
		if t.Peer || t.lateAddr == "" {
			continue
		}
		p.step(t.Name + ": throughput trace across a splice")
		tr, err := e.trace(ctx, t, s.TraceFor)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err != nil {
			res.Notes = append(res.Notes, fmt.Sprintf("%s: trace failed: %v", t.Name, err))
			continue
		}
		res.Traces = append(res.Traces, tr)
		if tr.SplicedBy != t.Name {
			res.Notes = append(res.Notes, fmt.Sprintf("%s trace: /flows showed the pair spliced by %q (it may decline a pair with bytes in flight and fall back)", t.Name, tr.SplicedBy))
		}
		traced = append(traced, t.Name)
		before, after := meanGbps(tr, 0.3, tr.SplicedAt), meanGbps(tr, tr.SplicedAt+0.2, 1e9)
		if before > 0 && after > 0 {
			smp.add(t.Name, "gbps_before_splice", "Gbit/s", before)
			smp.add(t.Name, "gbps_after_splice", "Gbit/s", after)
		}
	}
	p.finish()
	var ok []string
	for _, en := range engines {
		if !failed[en.Name()] || slices.Contains(traced, en.Name()) {
			ok = append(ok, en.Name())
		}
	}
	res.Rows = smp.rows(ok)
	res.Notes = append(res.Notes,
		fmt.Sprintf("splice_us: time from calling Engine.Splice to the engine's OnSpliced (forwarding in place, kernel state installed), for %d idle pairs spliced one after another while the earlier ones stay spliced; measured in the bench process in the forwarder namespace; %d run(s), cells are the median of the runs' percentiles (min–max)", s.Pairs, s.Runs),
		fmt.Sprintf("unsplice_us (engine ip): time from the client's one-byte write to Splice returning EndData with the pair back in control mode (sockets rebuilt, the byte readable), for %d idle pairs spliced one at a time with the client direction watched and the server direction held", s.Pairs),
		fmt.Sprintf("trace: one connection pushing to the sink through a listener with splice_after %v, sampled every %v; gbps_before_splice is the mean from 0.3s to the splice, gbps_after_splice from 0.2s after it to the end (one run)", lateSplice, traceInterval))
	return res, nil
}

// buildEnginesIn builds the engines inside the forwarder namespace, where
// an engine that attaches to devices finds the lab's interfaces.
func buildEnginesIn(e *Env) (*all.Set, error) {
	var set *all.Set
	err := e.Lab.Fwd.Do(func() error {
		set = all.Build(defaultEngines(), slog.New(slog.DiscardHandler))
		return nil
	})
	return set, err
}

// spliceIdlePairs opens n idle pairs (client namespace -> a listener in
// the forwarder namespace -> the origin's sink), splices them one at a time
// with en and returns each splice's cost in microseconds. It ends the
// splices and closes the pairs before returning.
func (e *Env) spliceIdlePairs(ctx context.Context, en engine.Engine, n int) ([]float64, error) {
	pairs, closeAll, err := e.idlePairs(ctx, n, en)
	defer closeAll()
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	costs := make([]float64, 0, n)
	for _, p := range pairs {
		spliced := make(chan time.Duration, 1)
		failed := make(chan error, 1)
		start := time.Now()
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := en.Splice(sctx, p, engine.Options{
				OnSpliced:  func() { spliced <- time.Since(start) },
				OnDetached: func() { p.CloseConns() }, // as the forwarder does
			})
			if err != nil {
				failed <- err
			} else {
				failed <- errors.New("splice ended before forwarding was in place")
			}
		}()
		select {
		case d := <-spliced:
			costs = append(costs, float64(d.Nanoseconds())/1e3)
		case err := <-failed:
			return nil, fmt.Errorf("pair %d: %w", p.ID, err)
		case <-time.After(spliceTimeout):
			return nil, fmt.Errorf("pair %d: OnSpliced not called within %v", p.ID, spliceTimeout)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return costs, nil
}

// idlePairs opens n pairs through a fresh listener in the forwarder
// namespace, for en to splice; the returned func closes them all.
func (e *Env) idlePairs(ctx context.Context, n int, en engine.Engine) ([]*engine.Pair, func(), error) {
	pairs, _, closeAll, err := e.idlePairsWithClients(ctx, n, en)
	return pairs, closeAll, err
}

// idlePairsWithClients is idlePairs that also returns each pair's client
// end. An engine that hands out upstream ports (engine.UpstreamPorts:
// ip's local_ports range) gives each upstream connection its port, as
// the forwarder's dials take it, so that a splice costs what it costs
// behind a listener.
func (e *Env) idlePairsWithClients(ctx context.Context, n int, en engine.Engine) ([]*engine.Pair, []net.Conn, func(), error) {
	var conns, clients []net.Conn
	closeAll := func() {
		for _, c := range conns {
			c.Close()
		}
	}
	ln, err := e.Lab.Fwd.Listen("tcp", net.JoinHostPort(e.Lab.Cfg.FwdClient.Addr().String(), "0"))
	if err != nil {
		return nil, nil, closeAll, err
	}
	defer ln.Close()
	sink := e.addrs.originAddr(Sink)
	pairs := make([]*engine.Pair, 0, n)
	for i := range n {
		c, err := e.Dial(ctx, "tcp", ln.Addr().String())
		if err != nil {
			return nil, nil, closeAll, fmt.Errorf("client dial: %w", err)
		}
		conns, clients = append(conns, c), append(clients, c)
		a, err := ln.Accept()
		if err != nil {
			return nil, nil, closeAll, err
		}
		conns = append(conns, a)
		up, err := e.dialUpstream(ctx, sink, en)
		if err != nil {
			return nil, nil, closeAll, fmt.Errorf("upstream dial: %w", err)
		}
		conns = append(conns, up)
		p := engine.NewPair(uint64(i+1), "splice-cost", a.(*net.TCPConn))
		p.SetUpstream(up.(*net.TCPConn))
		pairs = append(pairs, p)
	}
	return pairs, clients, closeAll, nil
}

// dialUpstream dials addr from the forwarder namespace, from a port of
// en's range if it hands them out, each port picked settled as the
// forwarder settles it (engine.SettlePicks).
func (e *Env) dialUpstream(ctx context.Context, addr string, en engine.Engine) (net.Conn, error) {
	ports, ok := en.(engine.UpstreamPorts)
	if !ok {
		return e.Lab.Fwd.Dial(ctx, "tcp", addr)
	}
	var picks []sockopt.Pick
	dctx := sockopt.WithLocalPort(ctx, func(s netip.AddrPort) (uint16, bool) {
		p, ok := ports.UpstreamPort(s)
		if ok {
			picks = append(picks, sockopt.Pick{Server: s, Port: p})
		}
		return p, ok
	})
	c, err := e.Lab.Fwd.Dial(dctx, "tcp", addr)
	engine.SettlePicks(ports, picks, c)
	return c, err
}

// trace samples throughput through t's late listener, which splices the
// pair lateSplice after it was set up.
func (e *Env) trace(ctx context.Context, t *Target, dur time.Duration) (Trace, error) {
	var samples []loadgen.Sample
	seen, err := e.engineSeenOn(ctx, t.Name+"-late", func() (err error) {
		samples, err = loadgen.Trace(ctx, e.Dial, t.lateAddr, dur, traceInterval, loadgen.WithDir(loadgen.Up))
		return err
	})
	if err != nil {
		return Trace{}, err
	}
	tr := Trace{Engine: t.Name, SplicedAt: lateSplice.Seconds(), SplicedBy: seen}
	for _, s := range samples {
		tr.AtS = append(tr.AtS, s.At.Seconds())
		tr.Gbps = append(tr.Gbps, s.Gbps)
	}
	return tr, nil
}

// meanGbps is the mean throughput of the samples ending in (from, to].
func meanGbps(tr Trace, from, to float64) float64 {
	var sum float64
	var n int
	for i, at := range tr.AtS {
		if at > from && at <= to {
			sum += tr.Gbps[i]
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

// failedInRun says why an engine has no more runs: the cells it has, if
// any, are the runs before this one.
func failedInRun(run int, err error) string {
	if run == 0 {
		return "failed: " + err.Error()
	}
	return fmt.Sprintf("failed in run %d, its cells are the %d before: %v", run+1, run, err)
}
