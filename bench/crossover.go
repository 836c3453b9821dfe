// The crossover experiment: the forwarder's CPU to move N bytes through a pair on copy or pipe against splicing it with ip, and the size where ip becomes the cheaper.

package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/splicer/splicer/loadgen"
	"github.com/splicer/splicer/origin"
)

const (
	// crossoverPort is the crossover splicer's first tcp listener, one an
	// engine (crossoverEngines' order); its http-reverse listeners start
	// crossoverHTTP ports above.
	crossoverPort  = 7960
	crossoverHTTP  = 5
	crossoverAdmin = "127.0.0.1:9960"
	// crossoverLocalPorts is the crossover splicer's engines.ip.local_ports:
	// 20,000 ports, apart from the main splicer's and the kernel's
	// ephemeral range (memory and idle use them while no crossover runs).
	crossoverLocalPorts = "10000-29999"
	// crossoverMinBatch and crossoverMaxBatch bound the transfers of one
	// point; crossoverWarm transfers before each are not measured.
	crossoverMinBatch = 8
	crossoverMaxBatch = 5000
	crossoverWarm     = 3
	// crossoverTimeout bounds one transfer.
	crossoverTimeout = 30 * time.Second
)

// crossoverEngines are the engines measured, the one auto starts a pair on
// (copy) first; ip is what the others are weighed against.
var crossoverEngines = []string{"copy", "pipe", "ip"}

// crossoverBase are the engines ip's cost is compared with: copy, where
// engine auto starts a pair (promote.after_bytes), and pipe, where a body
// below engines.ip.min_body goes.
var crossoverBase = []string{"copy", "pipe"}

// DefaultCrossoverSizes are the full run's transfer sizes, 1 KiB to 16 MiB.
var DefaultCrossoverSizes = kib(1, 4, 16, 64, 128, 256, 512, 1024, 2048, 4096, 16384)

// QuickCrossoverSizes span the same range in three points.
var QuickCrossoverSizes = kib(1, 1024, 16384)

// Crossover measures, in a splicer process of its own, what moving N bytes
// through one pair costs the forwarder with each engine: over a tcp
// listener (a connection per transfer: the client sends N bytes to the
// origin's sink and half-closes, the sink half-closes back once it has
// read them all) and over an http-reverse listener with engines.ip.min_body
// 0 (a keep-alive GET of an N-byte object per transfer). Per point it
// reports the process's CPU time per transfer and the median wall time,
// and per run the size where ip's curve crosses copy's and pipe's.
func Crossover(ctx context.Context, e *Env, s Settings) (*Result, error) {
	res := &Result{Experiment: "crossover"}
	if e.Lab == nil {
		res.Notes = append(res.Notes, "crossover needs the lab (root) for engine ip: not measured")
		return res, nil
	}
	var engines []string
	for _, name := range crossoverEngines {
		t := e.Target(name)
		switch {
		case t == nil:
			res.Unavailable = append(res.Unavailable, Missing{name, "not built"})
		case t.Unavailable != "":
			res.Unavailable = append(res.Unavailable, Missing{name, t.Unavailable})
		default:
			engines = append(engines, name)
		}
	}
	for _, t := range e.Targets {
		switch {
		case t.Peer:
			res.Unavailable = append(res.Unavailable, Missing{t.Name, "a peer has no engine to weigh against ip"})
		case !slices.Contains(crossoverEngines, t.Name):
			res.Unavailable = append(res.Unavailable, Missing{t.Name, "not measured: crossover weighs copy (where engine auto starts a pair) and pipe (where a short body goes) against ip"})
		}
	}
	if !slices.Contains(engines, "ip") {
		res.Notes = append(res.Notes, "crossover weighs engines against ip, which cannot run here: not measured")
		return res, nil
	}
	sizes := s.CrossoverSizes
	if len(sizes) == 0 {
		sizes = DefaultCrossoverSizes
	}
	x, err := e.startCrossover(ctx, engines)
	if err != nil {
		return nil, err
	}
	defer x.stop()
	smp := newSamples()
	seen := map[string]map[string]bool{}
	p := newProgress(s.Progress, "crossover", s.Runs*len(sizes)*len(engines)*len(crossoverModes))
	for run := 0; run < s.Runs; run++ {
		for _, mode := range crossoverModes {
			cpu := map[string]map[int64]float64{}
			for _, size := range sizes {
				for _, en := range engines {
					p.step(fmt.Sprintf("run %d %s %s %s", run+1, mode.name, en, sizeLabel(size)))
					pt, err := x.point(ctx, mode, en, size, s.Duration)
					if ctx.Err() != nil {
						return nil, ctx.Err()
					}
					if err != nil {
						return nil, fmt.Errorf("%s %s %s: %w", mode.name, en, sizeLabel(size), err)
					}
					pt.add(smp, mode, en, size)
					if pt.unsettled {
						res.Notes = append(res.Notes, fmt.Sprintf("run %d %s %s %s: the process still had pairs of the batch, or had not counted their splices' end, %v after it; read then", run+1, mode.name, en, sizeLabel(size), settleTimeout))
					}
					addSeen(seen, en+" "+mode.name, pt.engines)
					if cpu[en] == nil {
						cpu[en] = map[int64]float64{}
					}
					cpu[en][size] = pt.cpuUS
				}
			}
			for _, base := range crossoverBase {
				if cpu[base] == nil {
					continue
				}
				if at, ok := crossoverAt(sizes, cpu[base], cpu["ip"]); ok {
					smp.add("ip", mode.prefix+"crossover_"+base+"_kib", "KiB", at/1024)
				}
			}
		}
	}
	p.finish()
	res.Rows = smp.rows(engines)
	res.Notes = append(res.Notes, crossoverNotes(s, sizes, res)...)
	res.Notes = append(res.Notes, seenNotes(seen)...)
	return res, nil
}

// crossoverMode is one way of moving N bytes through a pair: the
// metric names' prefix and how one transfer is done.
type crossoverMode struct {
	name, prefix string
	http         bool
}

var crossoverModes = []crossoverMode{{name: "tcp"}, {name: "http", prefix: "http_", http: true}}

// crossoverPoint is one measured (mode, engine, size).
type crossoverPoint struct {
	// cpuUS is the splicer process's CPU per transfer; wallMS the median
	// transfer's wall time.
	cpuUS, wallMS float64
	// engines are those splicer's metrics counted splices for.
	engines []string
	// unsettled: the process was still busy with the batch's pairs
	// settleTimeout after it.
	unsettled bool
}

func (pt crossoverPoint) add(smp *samples, mode crossoverMode, en string, size int64) {
	smp.add(en, mode.prefix+"proc_cpu_us_"+sizeLabel(size), "µs", pt.cpuUS)
	smp.add(en, mode.prefix+"wall_ms_"+sizeLabel(size), "ms", pt.wallMS)
}

// crossoverAt is where ip's cost per transfer meets base's: between the
// last size at which ip costs more and the next, interpolated linearly in
// bytes (a copy's cost grows about linearly with them, a splice's hardly).
// It is the size past which ip stays the cheaper on every measured size.
// Where ip costs less at every size the crossover is at or below the
// smallest, which it returns; ok is false when ip costs more even at the
// largest size (the crossover is past the sizes measured).
func crossoverAt(sizes []int64, base, ip map[int64]float64) (float64, bool) {
	sorted := slices.Clone(sizes)
	slices.Sort(sorted)
	last := -1
	for i, size := range sorted {
		b, okb := base[size]
		c, okc := ip[size]
		if !okb || !okc {
			return 0, false
		}
		if c > b {
			last = i
		}
	}
	if last < 0 {
		return float64(sorted[0]), true
	}
	if last == len(sorted)-1 {
		return 0, false
	}
	lo, hi := sorted[last], sorted[last+1]
	dlo, dhi := ip[lo]-base[lo], ip[hi]-base[hi] // dlo > 0 >= dhi
	return float64(lo) + float64(hi-lo)*dlo/(dlo-dhi), true
}

// crossoverNotes say how the experiment measured and where ip crossed.
func crossoverNotes(s Settings, sizes []int64, r *Result) []string {
	labels := make([]string, len(sizes))
	for i, size := range sizes {
		labels[i] = sizeLabel(size)
	}
	notes := []string{
		fmt.Sprintf("a splicer process of its own in the forwarder namespace: a tcp listener per engine to the origin's sink (splice_after 0s: every pair spliced at once) and an http-reverse listener per engine to the origin's http service, engines.ip.min_body 0 (ip takes every body http-reverse does not copy itself: below 32 KiB it copies all); sizes %v; per point, after %d unmeasured transfers, one client in the client namespace does transfers one after another for about %v (%d to %d of them); %d run(s), engines interleaved within each size, cells the median of the runs (min–max)", labels, crossoverWarm, s.Duration, crossoverMinBatch, crossoverMaxBatch, s.Runs),
		"tcp: a connection per transfer, the client sends N bytes and half-closes, the sink half-closes back once it has read them all; http: a keep-alive GET of an N-byte object per transfer, over one connection",
		"proc_cpu_us: the splicer process's user+system CPU per transfer, its threads' run time from /proc/PID/task/*/schedstat (nanoseconds; /proc/PID/stat's 10 ms ticks when threads ended within the batch), so load from other processes on the machine distorts it little; the datapath's work in softirq (ip) and the kernel's TCP work outside the process's system calls are not in it, for any engine; wall_ms: the median transfer, from dial (tcp) or request (http) to the last byte, which load does distort",
		"crossover_<engine>_kib: the transfer size at which ip's proc_cpu_us meets that engine's, per run, between the last size where ip costs more and the next, interpolated linearly in bytes; a run where ip costs less at every size counts the smallest (the crossover is at or below it), one where ip costs more even at the largest size has none. copy is where engine auto starts a pair (listeners[].promote.after_bytes), pipe where a body below engines.ip.min_body goes",
	}
	for _, m := range []string{"crossover_copy_kib", "crossover_pipe_kib", "http_crossover_copy_kib", "http_crossover_pipe_kib"} {
		if row, ok := r.Row("ip", m); ok {
			notes = append(notes, fmt.Sprintf("%s: ip's CPU per transfer meets %s's at %s KiB (median of %d run(s), %s–%s)", m, crossoverBaseOf(m), num(row.Value), row.Runs, num(row.Min), num(row.Max)))
		} else {
			notes = append(notes, fmt.Sprintf("%s: no crossover within the sizes measured", m))
		}
	}
	return notes
}

// crossoverBaseOf is the engine a crossover metric compares ip with.
func crossoverBaseOf(metric string) string {
	for _, b := range crossoverBase {
		if slices.Contains([]string{"crossover_" + b + "_kib", "http_crossover_" + b + "_kib"}, metric) {
			return b
		}
	}
	return ""
}

// crossoverRun is the crossover splicer: its process and listeners.
type crossoverRun struct {
	e        *Env
	pid      int
	tcp, web map[string]string
	stop     func()
	payload  []byte
}

// startCrossover starts the crossover splicer with a tcp and an
// http-reverse listener per engine.
func (e *Env) startCrossover(ctx context.Context, engines []string) (*crossoverRun, error) {
	x := &crossoverRun{e: e, tcp: map[string]string{}, web: map[string]string{}, payload: make([]byte, 256<<10)}
	origin.WriteObject(&sliceWriter{b: x.payload}, int64(len(x.payload)))
	cfg := fmt.Sprintf("admin: %q\nlog: {level: warn, format: text}\nshutdown_timeout: 1s\nengines: {ip: {local_ports: %s, min_body: 0, pin_dir: off}}\nlisteners:\n",
		crossoverAdmin, crossoverLocalPorts)
	for i, en := range engines {
		x.tcp[en] = net.JoinHostPort(e.addrs.fwd, strconv.Itoa(crossoverPort+i))
		x.web[en] = net.JoinHostPort(e.addrs.fwd, strconv.Itoa(crossoverPort+crossoverHTTP+i))
		cfg += fmt.Sprintf("  - {name: crossover-%s, listen: %q, upstream: [%q], engine: %s, max_connections: 0, idle_timeout: 0s, splice_after: 0s}\n",
			en, x.tcp[en], e.addrs.originAddr(Sink), en)
		cfg += fmt.Sprintf("  - {name: crossover-%s-http, listen: %q, proxy: http-reverse, engine: %s, idle_timeout: 0s, routes: [{pool: origin}], pools: [{name: origin, servers: [%q]}]}\n",
			en, x.web[en], en, e.addrs.originAddr(HTTP))
	}
	path := filepath.Join(e.dir, "crossover.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	log, err := os.Create(filepath.Join(e.dir, "crossover.log"))
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithCancel(ctx)
	cmd := e.fwd.Command(pctx, e.splicer, "run", "--config", path)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		cancel()
		log.Close()
		return nil, err
	}
	x.pid = cmd.Process.Pid
	x.stop = func() { cancel(); cmd.Wait(); log.Close() }
	for _, en := range engines {
		for _, addr := range []string{x.tcp[en], x.web[en]} {
			if err := e.waitListening(addr); err != nil {
				x.stop()
				return nil, fmt.Errorf("crossover splicer did not start: %v: %s", err, e.LogTail("crossover"))
			}
		}
	}
	return x, nil
}

// sliceWriter fills b.
type sliceWriter struct {
	b []byte
	n int
}

func (w *sliceWriter) Write(p []byte) (int, error) {
	n := copy(w.b[w.n:], p)
	w.n += n
	return len(p), nil
}

// point measures one (mode, engine, size): a few unmeasured transfers
// tell how long one takes, then a batch sized to last about dur is
// measured, from a settled process to a settled process.
func (x *crossoverRun) point(ctx context.Context, mode crossoverMode, en string, size int64, dur time.Duration) (crossoverPoint, error) {
	before, _ := x.e.spliceCountsAt(ctx, crossoverAdmin)
	start := time.Now()
	if _, err := x.batch(ctx, mode, en, size, crossoverWarm); err != nil {
		return crossoverPoint{}, fmt.Errorf("warm-up: %w", err)
	}
	each := time.Since(start) / crossoverWarm
	n := crossoverMaxBatch
	if each > 0 {
		n = min(max(int(dur/each), crossoverMinBatch), crossoverMaxBatch)
	}
	cpu0, before, _ := x.settled(ctx, mode, en, before, crossoverWarm)
	walls, err := x.batch(ctx, mode, en, size, n)
	if err != nil {
		return crossoverPoint{}, err
	}
	cpu1, after, ok := x.settled(ctx, mode, en, before, n)
	pt := crossoverPoint{cpuUS: cpu1.since(cpu0).Seconds() * 1e6 / float64(n), unsettled: !ok}
	slices.Sort(walls)
	pt.wallMS = percentile(walls, 0.5)
	if after != nil && before != nil {
		pt.engines = movedEngines(before, after)
	}
	return pt, nil
}

// settleWait is how long settled waits for the pairs of a batch to end
// before it polls; settleTimeout bounds the polling.
const (
	settleWait    = 20 * time.Millisecond
	settleTimeout = 5 * time.Second
)

// settled waits until the crossover splicer holds no connection and no
// spliced pair and, in tcp mode, has counted the end of the n splices of
// en begun since before (splicer_splice_transitions_total counts a splice
// when it ends), so that what a pair costs after its client saw the end
// (ip's teardown) is charged to the batch that made it, not to the next.
// It returns the process's CPU time read just before the scrape that
// found it settled, which leaves that scrape's own cost out, and the
// splice counts; ok is false when it gave up after settleTimeout.
func (x *crossoverRun) settled(ctx context.Context, mode crossoverMode, en string, before map[string]float64, n int) (threadTimes, map[string]float64, bool) {
	time.Sleep(settleWait)
	deadline := time.Now().Add(settleTimeout)
	for {
		t := threadsCPU(x.pid)
		busy, counts, err := x.load(ctx)
		done := err == nil && busy == 0 && (mode.http || before == nil || counts[en]-before[en] >= float64(n))
		if done || time.Now().After(deadline) || ctx.Err() != nil {
			return t, counts, done
		}
		time.Sleep(settleWait)
	}
}

// load reads the crossover splicer's /metrics: its active connections
// and spliced pairs together, and its splices per engine (fallbacks left
// out).
func (x *crossoverRun) load(ctx context.Context) (float64, map[string]float64, error) {
	busy, counts := 0.0, map[string]float64{}
	err := x.e.metricLines(ctx, crossoverAdmin, func(line string) bool {
		if en, v, ok := parseSpliceLine(line); ok {
			counts[en] += v
			return true
		}
		name, rest, _ := strings.Cut(line, "{")
		if name != "splicer_connections_active" && name != "splicer_pairs_spliced" {
			return true
		}
		if i := strings.LastIndexByte(rest, ' '); i >= 0 {
			v, _ := strconv.ParseFloat(rest[i+1:], 64)
			busy += v
		}
		return true
	})
	return busy, counts, err
}

// batch does n transfers of size bytes one after another and returns
// each one's wall time in milliseconds.
func (x *crossoverRun) batch(ctx context.Context, mode crossoverMode, en string, size int64, n int) ([]float64, error) {
	walls := make([]float64, 0, n)
	if mode.http {
		url := "http://" + x.web[en] + origin.ObjectPath(size)
		r, err := loadgen.HTTPGet(ctx, x.e.Dial, url, n, 1)
		if err != nil {
			return nil, err
		}
		if r.Errors > 0 {
			return nil, fmt.Errorf("%d of %d GETs failed: %v", r.Errors, n, r.FirstErr)
		}
		// HTTPGet gives percentiles, not each request: the median stands
		// for every one.
		for range n {
			walls = append(walls, float64(r.P50.Microseconds())/1e3)
		}
		return walls, nil
	}
	for range n {
		start := time.Now()
		if err := x.transfer(ctx, x.tcp[en], size); err != nil {
			return nil, err
		}
		walls = append(walls, float64(time.Since(start).Microseconds())/1e3)
	}
	return walls, nil
}

// transfer sends size bytes through addr to the sink on a connection of
// its own, half-closes, and waits for the sink's half-close, which says
// it read them all.
func (x *crossoverRun) transfer(ctx context.Context, addr string, size int64) error {
	ctx, cancel := context.WithTimeout(ctx, crossoverTimeout)
	defer cancel()
	c, err := x.e.Dial(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("dial %s: %w", addr, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(crossoverTimeout))
	for left := size; left > 0; {
		w, err := c.Write(x.payload[:min(left, int64(len(x.payload)))])
		if err != nil {
			return fmt.Errorf("write: %w", err)
		}
		left -= int64(w)
	}
	cw, ok := c.(interface{ CloseWrite() error })
	if !ok {
		return errors.New("the client connection cannot half-close")
	}
	if err := cw.CloseWrite(); err != nil {
		return err
	}
	if n, err := io.Copy(io.Discard, c); err != nil || n != 0 {
		return fmt.Errorf("waiting for the sink's end: %d bytes, %v", n, err)
	}
	return nil
}
