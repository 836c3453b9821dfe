// web's wrk rows: the HTTP switch measured by wrk, the load generator others run: requests/s and latency percentiles through http-reverse per engine beside HAProxy and nginx.

package bench

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/origin"
)

// wrk's load: two threads, 16 keep-alive connections (what the issue's
// comparison used).
const (
	wrkThreads = 2
	wrkConns   = 16
)

// SwitchWrk runs wrk from the client namespace through every target with an
// HTTP switch (splicer's http-reverse per engine, HAProxy in HTTP mode,
// nginx), and straight to the origin by kernel routing (route), for each
// of s.SwitchSizes. Its rows name wrk as their tool; web
// reports them beside its own.
func SwitchWrk(ctx context.Context, e *Env, s Settings) (*Result, error) {
	res := &Result{Experiment: "web"}
	if _, err := exec.LookPath("wrk"); err != nil {
		return nil, fmt.Errorf("wrk not installed (apt-get install wrk)")
	}
	var targets []*Target
	for _, t := range e.switchTargets() {
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
	dur := max(s.Duration*2, time.Second)
	cpus := splitCPUs(runtime.NumCPU(), s.Pin)
	unpin, err := cpus.apply(ctx, e, targets)
	defer unpin()
	if err != nil {
		return nil, fmt.Errorf("pinning: %w", err)
	}
	smp := newSamples()
	p := newProgress(s.Progress, "web wrk", s.Runs*len(targets)*len(s.SwitchSizes))
	for run := 0; run < s.Runs; run++ {
		for _, t := range targets {
			for _, size := range s.SwitchSizes {
				l := sizeLabel(size)
				p.step(fmt.Sprintf("run %d %s %s", run+1, t.Name, l))
				url := "http://" + t.switchAddr + origin.ObjectPath(size)
				if err := e.warmUp(ctx, url, s.Warmup, cpus.load); err != nil {
					return nil, err
				}
				before := sampleCPU(t.Pids())
				r, err := e.wrk(ctx, url, dur, cpus.load)
				use := before.Since(t.Pids())
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				if err != nil {
					res.Notes = append(res.Notes, fmt.Sprintf("run %d %s %s: %v", run+1, t.Name, l, err))
					continue
				}
				smp.add(t.Name, "wrk_rps_"+l, "req/s", r.rps)
				smp.add(t.Name, "wrk_p50_ms_"+l, "ms", r.p50.Seconds()*1e3)
				smp.add(t.Name, "wrk_p99_ms_"+l, "ms", r.p99.Seconds()*1e3)
				if r.requests > 0 {
					smp.add(t.Name, "wrk_cpu_us_"+l, "µs", perRequestMicros(use.Machine, r.requests))
					smp.add(t.Name, "wrk_proc_cpu_us_"+l, "µs", perRequestMicros(use.Proc, r.requests))
				}
				if r.errors > 0 {
					res.Notes = append(res.Notes, fmt.Sprintf("run %d %s %s: wrk counted %d socket errors or non-2xx responses", run+1, t.Name, l, r.errors))
				}
			}
		}
	}
	p.finish()
	res.Rows = smp.rows(names(targets))
	for i := range res.Rows {
		res.Rows[i].Tool = "wrk"
	}
	for _, ours := range []string{"auto", "auto-workers"} {
		for _, peer := range []string{"haproxy", "haproxy-buf256k"} {
			if v := versusNote(res, s.SwitchSizes, ours, peer); v != "" {
				res.Notes = append(res.Notes, v)
			}
		}
	}
	if c := ceilingNote(res, s.SwitchSizes, "route", "auto", "auto-workers", "haproxy", "haproxy-buf256k", "nginx"); c != "" {
		res.Notes = append(res.Notes, c)
	}
	res.Notes = append(res.Notes,
		fmt.Sprintf("wrk -t%d -c%d -d%v --latency from the client namespace, %d run(s), targets interleaved, %s; cells are median (min–max); %s", wrkThreads, wrkConns, dur, s.Runs, describeWarmup(s.Warmup), cpus.describe()),
		"route: no proxy, wrk asks the origin itself through the forwarder namespace's kernel routing; engines: splicer's http-reverse listener with that engine (auto: engine auto, what a configuration without an engine gets: ip for a body from engines.ip.min_body, "+config.DefaultMinBody.String()+" by default, pipe below it or where ip cannot), which copies a body below 512 KiB itself whatever the engine, so the engine rows differ from there; auto-workers: auto in a splicer of its own with workers, a process per forwarder CPU each on one thread (nginx's process model; auto is one process with a thread per CPU, HAProxy's); ip: engine ip, whose listener hands a body below engines.ip.min_body to the next engine of its chain (pipe, as auto does), so its rows are ip's only for bodies past that; haproxy, haproxy-splice: mode http with keep-alive, HAProxy's default 16 KiB buffer; haproxy-buf256k: haproxy's switch with tune.bufsize 262144; nginx: proxy_pass with upstream keepalive 64; each peer adds what http-reverse adds by default (Forwarded, X-Forwarded-For, X-Forwarded-Proto naming the client, the client's own dropped)",
		"wrk_cpu_us: every CPU's busy time per request (wrk and the origin included, as is the time around wrk's run: its start and exit); wrk_proc_cpu_us: the forwarder process's own (splicer's one process, auto-workers' master and workers, HAProxy's, nginx's master and workers)",
		"unlike loadgen (a closed loop of Go goroutines sharing the CPUs with the forwarder), wrk is an event-loop C load generator others run: the two differ in client cost, so compare rows within one tool")
	return res, nil
}

// switchTargets are every target with an HTTP switch or the reason it
// has none: splicer's first (its engines, then auto), then the peers.
func (e *Env) switchTargets() []*Target {
	all := append(append([]*Target{}, e.Targets...), e.SwitchPeers...)
	slices.SortStableFunc(all, func(x, y *Target) int { return cmp.Compare(b2i(x.Peer), b2i(y.Peer)) })
	return all
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// warmUp runs wrk against url for d, unmeasured (nothing with d 0). Only
// a cancelled run is an error: a failing target shows in the measured run.
func (e *Env) warmUp(ctx context.Context, url string, d time.Duration, cpus []int) error {
	if d <= 0 {
		return nil
	}
	e.wrk(ctx, url, d, cpus)
	return ctx.Err()
}

// describeWarmup says in a note what came before each measured run.
func describeWarmup(d time.Duration) string {
	if d <= 0 {
		return "no warm-up"
	}
	return fmt.Sprintf("each after an unmeasured %v wrk run at the same target and size", d)
}

// wrkResult is what one wrk run reports.
type wrkResult struct {
	rps      float64
	p50, p99 time.Duration
	errors   int
	// requests is the count of requests wrk completed.
	requests int64
}

// perRequestMicros divides CPU time among n requests, in µs.
func perRequestMicros(d time.Duration, n int64) float64 {
	return float64(d.Microseconds()) / float64(n)
}

// wrk runs wrk against url for dur on cpus (taskset; nil: anywhere) and
// parses its report.
func (e *Env) wrk(ctx context.Context, url string, dur time.Duration, cpus []int) (wrkResult, error) {
	return e.runWrk(ctx, cpus, "-t"+strconv.Itoa(wrkThreads), "-c"+strconv.Itoa(wrkConns), "-d"+dur.String(), "--latency", url)
}

// runWrk runs wrk with args from the client on cpus (taskset; nil:
// anywhere) and parses its report.
func (e *Env) runWrk(ctx context.Context, cpus []int, args ...string) (wrkResult, error) {
	name := "wrk"
	if len(cpus) > 0 {
		if _, err := exec.LookPath("taskset"); err == nil {
			args, name = append([]string{"-c", cpuList(cpus), "wrk"}, args...), "taskset"
		}
	}
	out, err := e.Client.Command(ctx, name, args...).CombinedOutput()
	if err != nil {
		return wrkResult{}, fmt.Errorf("wrk: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return parseWrk(string(out))
}

// parseWrk reads requests/s, the 50% and 99% latency and the error counts
// from wrk --latency output.
func parseWrk(out string) (wrkResult, error) {
	var r wrkResult
	var found int
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 2 && f[0] == "Requests/sec:":
			v, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				return r, fmt.Errorf("wrk: %q: %v", sc.Text(), err)
			}
			r.rps, found = v, found+1
		case len(f) == 2 && (f[0] == "50%" || f[0] == "99%"):
			d, err := parseWrkDuration(f[1])
			if err != nil {
				return r, err
			}
			if f[0] == "50%" {
				r.p50 = d
			} else {
				r.p99 = d
			}
			found++
		case len(f) >= 3 && f[1] == "requests" && f[2] == "in":
			n, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return r, fmt.Errorf("wrk: %q: %v", sc.Text(), err)
			}
			r.requests = n
		case len(f) > 0 && (f[0] == "Non-2xx" || f[0] == "Socket"):
			for _, x := range f {
				if n, err := strconv.Atoi(strings.TrimSuffix(x, ",")); err == nil {
					r.errors += n
				}
			}
		}
	}
	if found != 3 {
		return r, fmt.Errorf("wrk: unexpected report:\n%s", out)
	}
	return r, nil
}

// parseWrkDuration reads wrk's latency values: 635.91us, 2.85ms, 1.02s.
func parseWrkDuration(s string) (time.Duration, error) {
	for _, u := range []struct {
		suffix string
		unit   time.Duration
	}{{"us", time.Microsecond}, {"ms", time.Millisecond}, {"m", time.Minute}, {"s", time.Second}} {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, fmt.Errorf("wrk latency %q: %v", s, err)
			}
			return time.Duration(f * float64(u.unit)), nil
		}
	}
	return 0, fmt.Errorf("wrk latency %q: unknown unit", s)
}
