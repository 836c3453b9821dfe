// Running experiments: settings, the list of experiments, interleaved repetitions and the progress line.

package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Settings control how long and how often the experiments measure.
type Settings struct {
	// Runs is the number of repetitions of every measurement; targets are
	// interleaved within a repetition (A B C A B C ...) so that drift of
	// the machine over time hits every target alike.
	Runs int
	// Duration is the measured window of each bulk and request/response
	// run, after loadgen's warm-up.
	Duration time.Duration
	// Pairs is how many idle pairs splice-cost splices per engine.
	Pairs int
	// TraceFor is the length of each throughput-over-time trace; pairs are
	// spliced a second in.
	TraceFor time.Duration
	// MemoryPairs are the pair counts the memory experiment holds.
	MemoryPairs []int
	// IdlePairs are the pair counts the idle experiment holds at once.
	IdlePairs []int
	// WebSizes and SwitchSizes are the object sizes, in bytes, web and
	// switch fetch.
	WebSizes, SwitchSizes []int64
	// Pin has web's wrk rows run wrk and the origin on half the CPUs and
	// every forwarder on the other half (see splitCPUs); without it only
	// wrk is pinned.
	Pin bool
	// Warmup is an unmeasured wrk run at the same target and object size
	// before each measured point of web's wrk rows, so that no point
	// inherits what the run before it (another target's largest object)
	// left behind: full socket buffers, sockets closing, cold caches.
	Warmup time.Duration
	// ConnRateFor is how long connrate measures each point (target, object
	// size, concurrency), alone and in sequence; a target's points together
	// last longer than TIME_WAIT's 60 s in the full run, so that the next
	// target meets all it left behind.
	ConnRateFor time.Duration
	// ConnRateSizes and ConnRateConns narrow connrate's object sizes and
	// concurrent connections; empty, the full run's (1 and 64 KiB, 16 and
	// 256 connections).
	ConnRateSizes []int64
	ConnRateConns []int
	// IPRateFor and IPRateConns are how long and with how many clients
	// iprate opens pairs through engine ip to one upstream; IPRatePorts
	// is the size of its engines.ip.local_ports (0: the default 20,000).
	IPRateFor   time.Duration
	IPRateConns int
	IPRatePorts int
	// CrossoverSizes are the transfer sizes, in bytes, crossover
	// measures; empty, DefaultCrossoverSizes.
	CrossoverSizes []int64
	// TLSQuick narrows tls to 1 KiB and 1 MiB on keep-alive connections
	// (no 64 KiB, no Connection: close point).
	TLSQuick bool
	// Progress receives a one-line progress counter (stderr); nil for none.
	Progress io.Writer
}

// DefaultSettings are the full run's settings.
func DefaultSettings() Settings {
	return Settings{Runs: 5, Duration: 2 * time.Second, Pairs: 1000, TraceFor: 3 * time.Second,
		MemoryPairs: []int{1000, MaxMemoryPairs}, IdlePairs: []int{10000, 100000}, Warmup: 500 * time.Millisecond, ConnRateFor: 15 * time.Second,
		WebSizes: kib(1, 5, 10, 15, 20, 33, 45, 64, 90, 128), SwitchSizes: kib(1, 10, 64, 100, 1024, 8192),
		IPRateFor: 120 * time.Second, IPRateConns: 64}
}

// QuickSettings make `all` a smoke test: each experiment in well under 90
// seconds (connrate: 1 KiB over 16 connections, a second a point; tls:
// 1 KiB and 1 MiB keep-alive, a second a point).
func QuickSettings() Settings {
	return Settings{Runs: 1, Duration: 250 * time.Millisecond, Pairs: 200, TraceFor: 2 * time.Second,
		MemoryPairs: []int{500}, IdlePairs: []int{2000}, ConnRateFor: time.Second, ConnRateSizes: kib(1), ConnRateConns: []int{16},
		WebSizes: kib(1, 64, 128), SwitchSizes: kib(1, 1024), TLSQuick: true,
		IPRateFor: 5 * time.Second, IPRateConns: 16, CrossoverSizes: QuickCrossoverSizes}
}

// kib converts sizes in KiB to bytes.
func kib(sizes ...int64) []int64 {
	out := make([]int64, len(sizes))
	for i, s := range sizes {
		out[i] = s << 10
	}
	return out
}

// Experiment is one of the papers' experiments.
type Experiment struct {
	Name string
	// Help is one line for `splicer bench -h`.
	Help string
	// Pending, when set, says what the experiment waits for; it has no Run.
	Pending string
	// Tool is what measures the experiment's rows, unless a row says.
	Tool string
	Run  func(ctx context.Context, e *Env, s Settings) (*Result, error)
}

// RunExperiment runs x and names the tool on every row that does not.
func RunExperiment(ctx context.Context, e *Env, x Experiment, s Settings) (*Result, error) {
	r, err := x.Run(ctx, e, s)
	if r != nil {
		if n := ccNote(e.ccFwd, e.ccServer, e.ccChosen); n != "" {
			r.Notes = append(r.Notes, n)
		}
		for i := range r.Rows {
			if r.Rows[i].Tool == "" {
				r.Rows[i].Tool = x.Tool
			}
		}
	}
	return r, err
}

// Experiments are every experiment, in the order `all` runs them.
var Experiments = []Experiment{
	{Name: "segment", Help: "request/response of 1- and 1460-byte messages on one connection: txn/s, CPU µs per txn, speedup vs copy (seed 001 Table II); beside it sockperf ping-pong of 14 and 1460 bytes: avg and p99 round trip µs", Tool: "loadgen", Run: Segment},
	{Name: "throughput", Help: "bulk transfer over 1, 2, 3 and 8 connections: Gbit/s and CPU s per GB (seed 001 Table III); beside it iperf3 over 1 and 8 streams: Gbit/s; targets include auto (a tcp listener with no engine: copy promoted to ip)", Tool: "loadgen", Run: Throughput},
	{Name: "splice-cost", Help: "time to splice idle pairs (median, p99) and throughput over time across a splice under load (seed 001 §V-B3, Fig. 10)", Tool: "splicer-bench", Run: SpliceCost},
	{Name: "memory", Help: "bytes per pair held unspliced and spliced: process RSS, kernel socket memory, BPF map memory (seed 001 §V-C)", Tool: "splicer-bench", Run: Memory},
	{Name: "idle", Help: "up to 100,000 idle pairs spliced by ip through one tcp listener at once: the forwarder's descriptors, RSS and BPF bytes per pair, and how many pairs still echo at the end", Tool: "splicer-bench", Run: Idle},
	{Name: "web", Help: "GET and CONNECT through the HTTP forward proxy, a connection per request, objects of 1 to 128 KiB: requests/s, CPU µs per request, p50 latency (seed 002); beside it wrk (2 threads, 16 keep-alive connections) through http-reverse per engine, HAProxy (mode http) and nginx (proxy_pass, upstream keepalive), objects of 1 KiB to 1 MiB: requests/s, p50/p99 latency", Tool: "loadgen", Run: Web},
	{Name: "switch", Help: "GETs over a keep-alive connection through http-reverse and HAProxy in HTTP mode, objects of 1 KiB to 1 MiB: p50/p99 latency, Gbit/s (seed 003)", Tool: "loadgen", Run: Switch},
	{Name: "connrate", Help: "connection churn: wrk -H 'Connection: close' (1 and 64 KiB objects, 16 and 256 connections) through splicer's tcp listener per engine and auto, http-reverse and http-forward (auto), HAProxy (mode tcp, mode http), nginx (stream, proxy_pass) and to the origin direct; beside it loadgen's connect/send/close to an echo: conn/s alone (a fresh lab and process per target) and in sequence (one process per forwarder, targets one after another) with their ratio, p50/p99 latency, forwarder CPU µs per connection, errors, the engine that carried the pairs", Tool: "wrk", Run: ConnRate},
	{Name: "iprate", Help: "new pairs spliced by engine ip per second to one upstream for 2 minutes (loadgen connect/send/close through a tcp listener with engine ip to an echo), past the ~330/s the 20,000 ports of engines.ip.local_ports carry within TIME_WAIT: pairs/s, pairs spliced, fallbacks by reason, ports taken again from TIME_WAIT, descriptors held, CPU µs per pair", Tool: "loadgen", Run: IPRate},
	{Name: "crossover", Help: "the forwarder process's CPU per transfer (and wall time) to move 1 KiB to 16 MiB through one pair on copy, pipe and ip: a connection per transfer through a tcp listener to the origin's sink, and keep-alive GETs through http-reverse with engines.ip.min_body 0; the size where ip becomes cheaper than copy (listeners[].promote.after_bytes) and than pipe (engines.ip.min_body), plotted", Tool: "splicer-bench", Run: Crossover},
	{Name: "tls", Help: "wrk over https (2 threads, 16 connections; 1 KiB, 64 KiB, 1 MiB keep-alive and 1 KiB with Connection: close, handshakes per second): SNI passthrough through splicer's tcp listener with tls_routes (auto, ip confirmed per point), HAProxy (mode tcp, req.ssl_sni), nginx (stream, ssl_preread) and to the TLS origin direct; TLS termination through http-reverse, HAProxy (bind ssl crt) and nginx (listen ssl): requests/s, p99, forwarder CPU µs per request, ratios to the peers", Tool: "wrk", Run: TLS},
}

// Lookup returns the named experiment.
func Lookup(name string) (Experiment, bool) {
	for _, x := range Experiments {
		if x.Name == name {
			return x, true
		}
	}
	return Experiment{}, false
}

// progress is a one-line counter redrawn with \r on a terminal; elsewhere
// (a log file) it writes a line per tenth of the way.
type progress struct {
	w           io.Writer
	tty         bool
	name        string
	done, total int
	start       time.Time
}

func newProgress(w io.Writer, name string, total int) *progress {
	if w == nil {
		w = io.Discard
	}
	return &progress{w: w, tty: isTerminal(w), name: name, total: total, start: time.Now()}
}

// step shows what is being measured now.
func (p *progress) step(what string) {
	p.done++
	switch {
	case p.tty:
		fmt.Fprintf(p.w, "\r\033[K%s %d/%d %s (%.0fs)", p.name, p.done, p.total, what, time.Since(p.start).Seconds())
	case p.total >= 10 && p.done%(p.total/10) == 0 || p.done == 1:
		// A log gets a line per tenth of the way, not one per measurement.
		fmt.Fprintf(p.w, "%s %d/%d %s (%.0fs)\n", p.name, p.done, p.total, what, time.Since(p.start).Seconds())
	}
}

// finish ends the line.
func (p *progress) finish() {
	if p.tty {
		fmt.Fprint(p.w, "\r\033[K")
	}
	fmt.Fprintf(p.w, "%s: %d measurements in %.1fs\n", p.name, p.done, time.Since(p.start).Seconds())
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// missing lists the unavailable targets of the Env.
func (e *Env) missing() []Missing {
	var m []Missing
	for _, t := range e.Targets {
		if t.Unavailable != "" {
			m = append(m, Missing{t.Name, t.Unavailable})
		}
	}
	return m
}

// names of targets.
func names(ts []*Target) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.Name
	}
	return out
}
