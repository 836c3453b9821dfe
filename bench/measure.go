// Measurements shared by the experiments: bulk throughput with CPU per GB, request/response rates, the engine seen in /flows.

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/splicer/splicer/loadgen"
)

// BulkRun is one bulk transfer through a target.
type BulkRun struct {
	Gbps float64
	// ProcSPerGB is the forwarder processes' own CPU seconds per GB moved;
	// MachineSPerGB is every CPU's busy time per GB, softirq included, which
	// also counts the load generator and origin (the same work for every
	// target) and is the only honest figure for kernel forwarding.
	ProcSPerGB, MachineSPerGB float64
	Bytes                     int64
	// SplicedBy is the engine /flows showed splicing each connection's
	// pair when it was handed over ("" for one not seen spliced in time;
	// none through a peer): whether the run measured its row's engine.
	SplicedBy []string
}

// Bulk pushes data from the client to the origin's sink through t over
// conns connections for dur, and accounts CPU over the measured window.
func (e *Env) Bulk(ctx context.Context, t *Target, conns int, dur time.Duration) (BulkRun, error) {
	pids := t.Pids()
	var start CPUSample
	var by []string
	dial := e.dialSpliced(t, conns, func() { start = sampleCPU(pids) }, &by)
	r, err := loadgen.Bulk(ctx, dial, t.Addr(Sink), conns, dur, loadgen.Up)
	use := start.Since(pids)
	if err != nil {
		return BulkRun{}, fmt.Errorf("%s bulk: %w", t.Name, err)
	}
	if r.Bytes == 0 || use.Wall <= 0 {
		return BulkRun{}, fmt.Errorf("%s bulk: no bytes moved", t.Name)
	}
	// CPU was sampled from the moment every pair was spliced, around
	// warm-up and measured window together: charge the window its share of
	// the wall time.
	share := r.Elapsed.Seconds() / use.Wall.Seconds()
	gb := float64(r.Bytes) / 1e9
	return BulkRun{Gbps: r.Gbps, Bytes: r.Bytes, SplicedBy: by,
		ProcSPerGB:    use.Proc.Seconds() * share / gb,
		MachineSPerGB: use.Machine.Seconds() * share / gb}, nil
}

// RRRun is one request/response run through a target.
type RRRun struct {
	TPS float64
	// ProcUSPerTxn and MachineUSPerTxn are CPU microseconds per transaction.
	ProcUSPerTxn, MachineUSPerTxn float64
	P50, P99                      time.Duration
	// SplicedBy is as BulkRun's.
	SplicedBy []string
}

// RR ping-pongs size-byte messages with the origin's echo through t.
func (e *Env) RR(ctx context.Context, t *Target, size int, dur time.Duration) (RRRun, error) {
	pids := t.Pids()
	var start CPUSample
	var by []string
	dial := e.dialSpliced(t, 1, func() { start = sampleCPU(pids) }, &by)
	r, err := loadgen.RR(ctx, dial, t.Addr(Echo), size, dur)
	use := start.Since(pids)
	if err != nil {
		return RRRun{}, fmt.Errorf("%s rr%d: %w", t.Name, size, err)
	}
	if r.Txns == 0 {
		return RRRun{}, fmt.Errorf("%s rr%d: no transaction completed", t.Name, size)
	}
	share := r.Elapsed.Seconds() / use.Wall.Seconds()
	n := float64(r.Txns)
	return RRRun{TPS: r.TPS, P50: r.P50, P99: r.P99, SplicedBy: by,
		ProcUSPerTxn:    use.Proc.Seconds() * share / n * 1e6,
		MachineUSPerTxn: use.Machine.Seconds() * share / n * 1e6}, nil
}

// spliceWait bounds how long a load generator's connection waits for its
// pair to be spliced; a pair still in control mode after it (an engine
// that declined and fell back, say) is measured as it is.
const spliceWait = 3 * time.Second

// dialSpliced is the load generators' dialer for target t. For an engine it
// hands a connection over only once /flows shows the pair spliced, so that
// the measurement sees the engine, not the proxy's control mode, and an
// engine that splices only idle pairs (ip) gets them idle. When the last of
// conns connections is ready it calls ready, where CPU accounting starts.
// It appends to by the engine /flows showed splicing each pair ("" for one
// not seen spliced in time); nothing for a peer.
func (e *Env) dialSpliced(t *Target, conns int, ready func(), by *[]string) loadgen.DialFunc {
	var mu sync.Mutex
	n := 0
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := e.Dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		engine, spliced := "", !t.Peer
		if spliced {
			engine = e.waitSpliced(ctx, c.LocalAddr().String())
		}
		mu.Lock()
		if spliced {
			*by = append(*by, engine)
		}
		n++
		last := n == conns
		mu.Unlock()
		if last {
			ready()
		}
		return c, nil
	}
}

// waitSpliced polls /flows until the pair of the client at addr is spliced,
// for at most spliceWait, and returns the engine splicing it ("" if none
// did in time).
func (e *Env) waitSpliced(ctx context.Context, client string) string {
	deadline := time.Now().Add(spliceWait)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		flows, err := e.Flows(ctx)
		if err == nil {
			if i := slices.IndexFunc(flows, func(f Flow) bool {
				return f.Client == client && f.State == "spliced"
			}); i >= 0 {
				return flows[i].Engine
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	return ""
}

// Flow is the part of splicer's /flows entries the harness reads.
type Flow struct {
	Client   string `json:"client"`
	Listener string `json:"listener"`
	Engine   string `json:"engine"`
	State    string `json:"state"`
	Note     string `json:"note"`
}

// admin is the HTTP client for splicer's admin endpoints in the forwarder
// namespace; one per Env, so that frequent polls reuse their connections.
func (e *Env) admin() *http.Client {
	e.adminOnce.Do(func() {
		e.adminClient = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return e.fwd.Dialer()(ctx, network, addr)
		}}, Timeout: 5 * time.Second}
	})
	return e.adminClient
}

// Flows fetches splicer's /flows through the forwarder host.
func (e *Env) Flows(ctx context.Context) ([]Flow, error) {
	return e.flowsAt(ctx, e.AdminAddr)
}

// flowsAt fetches /flows from the splicer whose admin endpoint is addr on
// the forwarder host.
func (e *Env) flowsAt(ctx context.Context, addr string) ([]Flow, error) {
	return e.flowsWith(ctx, e.admin(), addr)
}

// flowsWith is flowsAt through hc.
func (e *Env) flowsWith(ctx context.Context, hc *http.Client, addr string) ([]Flow, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/flows", nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var flows []Flow
	return flows, json.NewDecoder(resp.Body).Decode(&flows)
}

// EngineSeen reports which engine splicer's /flows shows for the pairs of
// target t's sink listener while fn runs: the proof that a row measured the
// engine it names.
func (e *Env) EngineSeen(ctx context.Context, t *Target, fn func() error) (string, error) {
	return e.engineSeenOn(ctx, t.Name+"-sink", fn)
}

// engineSeenOn reports the engine /flows shows for the first spliced pair of
// listener while fn runs.
func (e *Env) engineSeenOn(ctx context.Context, listener string, fn func() error) (string, error) {
	seen, err := e.watchEngines(ctx, listener, true, fn)
	if len(seen) == 0 {
		return "", err
	}
	return seen[0], err
}

// enginesSeenOn returns the engines /flows shows for spliced pairs of
// listener while fn runs, in the order first seen. Unlike engineSeenOn it
// keeps polling: under engine auto a pair shows copy until it is promoted
// to ip.
func (e *Env) enginesSeenOn(ctx context.Context, listener string, fn func() error) ([]string, error) {
	return e.watchEngines(ctx, listener, false, fn)
}

// watchEngines polls /flows every 100 ms while fn runs and returns the
// engines of listener's spliced pairs in the order first seen; with
// first, it stops at the first, so as not to weigh on what fn measures.
func (e *Env) watchEngines(ctx context.Context, listener string, first bool, fn func() error) ([]string, error) {
	seen := make(chan []string, 1)
	done := make(chan struct{})
	go func() {
		var out []string
		defer func() { seen <- out }()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			flows, err := e.Flows(ctx)
			if err != nil {
				continue
			}
			for _, f := range flows {
				if f.Listener == listener && f.State == "spliced" && !slices.Contains(out, f.Engine) {
					out = append(out, f.Engine)
				}
			}
			if first && len(out) > 0 {
				return
			}
		}
	}()
	err := fn()
	close(done)
	return <-seen, err
}
