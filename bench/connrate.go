// The connrate experiment: connection churn (a connection per request) through every listener kind beside HAProxy, nginx and the origin direct, each target measured alone and in a sequence in one process per forwarder.

package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/splicer/splicer/engine/all"
	"github.com/splicer/splicer/loadgen"
	"github.com/splicer/splicer/origin"
)

// connLoad is what connrate measures: wrk's points are every object size
// over every count of concurrent connections, the plain TCP points echo
// sizes[0] over every count; each point lasts dur.
type connLoad struct {
	sizes []int64
	conns []int
	dur   time.Duration
}

// connLoadOf is s's load: the full run's 1 and 64 KiB over 16 and 256
// connections unless s narrows them (--quick).
func connLoadOf(s Settings) connLoad {
	l := connLoad{sizes: s.ConnRateSizes, conns: s.ConnRateConns, dur: max(s.ConnRateFor, time.Second)}
	if len(l.sizes) == 0 {
		l.sizes = kib(1, 64)
	}
	if len(l.conns) == 0 {
		l.conns = []int{16, 256}
	}
	return l
}

// connrate's phases: each target alone in a stage of its own, then every
// target in sequence in one stage.
const (
	phaseAlone    = "alone"
	phaseSequence = "sequence"
)

// connSlowed is the sequence-to-alone ratio under which a note says a
// target was slowed by the targets before it.
const connSlowed = 0.9

// connPoint is one measured point of a target: wrk's GETs of an object of
// size over conns connections, or (tcp) loadgen's connect/send/close of
// size bytes to the echo.
type connPoint struct {
	size  int64
	conns int
	tcp   bool
}

// label names the point in metric names: 1k-c16, tcp1k-c256.
func (p connPoint) label() string {
	l := sizeLabel(p.size) + "-c" + strconv.Itoa(p.conns)
	if p.tcp {
		return "tcp" + l
	}
	return l
}

// connPoints are c's points: wrk's for every target, the plain TCP ones
// for a byte forwarder (and route).
func connPoints(c connSpec, l connLoad) []connPoint {
	var out []connPoint
	for _, size := range l.sizes {
		for _, n := range l.conns {
			out = append(out, connPoint{size: size, conns: n})
		}
	}
	if c.forwardsBytes() {
		for _, n := range l.conns {
			out = append(out, connPoint{size: l.sizes[0], conns: n, tcp: true})
		}
	}
	return out
}

// connMeasure is what one point measured.
type connMeasure struct {
	tool     string
	rate     float64 // connections (a request each) per second
	p50, p99 time.Duration
	// errors are wrk's socket errors and non-2xx responses, or loadgen's
	// failed transactions; firstErr is loadgen's first.
	errors   int64
	firstErr error
	conns    int64
	// procUS is the forwarder processes' CPU µs per connection; hasProc
	// is false where no process forwards (route).
	procUS  float64
	hasProc bool
	// splices are splicer's splices per engine during the point (its
	// counters); flows is the engine /flows showed for a spliced pair of
	// the point's listener, "" if it caught none. Both unset for a peer.
	splices map[string]float64
	flows   string
}

// ConnRate measures connection churn: wrk with Connection: close (a
// connection per request) and loadgen's connect/send/close through every
// listener kind, HAProxy, nginx and to the origin direct. Every target is
// measured twice: alone (a fresh lab and a forwarder process serving it
// only) and in sequence (one lab, one process per forwarder serving all its
// targets, the targets one after another), so that what one target leaves
// behind (TIME_WAIT, reserved ports, tables) is felt by the next.
func ConnRate(ctx context.Context, e *Env, s Settings) (*Result, error) {
	res := &Result{Experiment: "connrate"}
	if _, err := exec.LookPath("wrk"); err != nil {
		return nil, fmt.Errorf("wrk not installed (apt-get install wrk)")
	}
	probe := all.Build(defaultEngines(), e.log)
	probe.Close()
	engineReason := func(name string) string {
		if !slices.Contains(all.Names(), name) {
			return "not built yet"
		}
		return probe.Reason(name)
	}
	load := connLoadOf(s)
	total := 0
	for _, c := range connSpecs {
		total += 2 * len(connPoints(c, load))
	}
	p := newProgress(s.Progress, "connrate", total)
	tally := newConnTally()
	unavailable := map[string]string{}
	for _, c := range connSpecs {
		if err := e.connStage(ctx, []connSpec{c}, engineReason, phaseAlone, load, p, tally, unavailable); err != nil {
			return nil, err
		}
	}
	if err := e.connStage(ctx, connSpecs, engineReason, phaseSequence, load, p, tally, unavailable); err != nil {
		return nil, err
	}
	p.finish()
	var measured []string
	for _, c := range connSpecs {
		if why, ok := unavailable[c.name]; ok {
			res.Unavailable = append(res.Unavailable, Missing{c.name, why})
		} else {
			measured = append(measured, c.name)
		}
	}
	res.Unavailable = append(res.Unavailable,
		Missing{"haproxy-splice", "connrate runs HAProxy as configured by default (haproxy: mode tcp; haproxy-http: mode http)"},
		Missing{"socat", "a process forked per connection: not a forwarder for connection churn"})
	rows, notes := tally.result(measured)
	res.Rows = rows
	for _, m := range unmeasured(targetsNamed(measured), rows) {
		res.Unavailable = append(res.Unavailable, m)
	}
	res.Notes = append(res.Notes, tally.notes...)
	res.Notes = append(res.Notes, notes...)
	res.Notes = append(res.Notes, connMethodNotes(load.dur, e.Lab != nil)...)
	return res, nil
}

// targetsNamed makes bare targets of names, for unmeasured.
func targetsNamed(names []string) []*Target {
	out := make([]*Target, len(names))
	for i, n := range names {
		out[i] = &Target{Name: n}
	}
	return out
}

// connStage builds a stage, starts the forwarders of specs in it and
// measures their points in order as phase; a target that cannot start is
// recorded in unavailable.
func (e *Env) connStage(ctx context.Context, specs []connSpec, engineReason func(string) string, phase string, load connLoad, p *progress, tally *connTally, unavailable map[string]string) error {
	st, err := e.newConnStage(ctx, load.sizes)
	if err != nil {
		return fmt.Errorf("connrate %s stage: %w", phase, err)
	}
	defer st.Close()
	for i, t := range st.startConnForwarders(ctx, specs, engineReason) {
		c := specs[i]
		if t.Unavailable != "" {
			if _, ok := unavailable[c.name]; !ok {
				unavailable[c.name] = t.Unavailable
			}
			p.done += len(connPoints(c, load))
			continue
		}
		for _, pt := range connPoints(c, load) {
			p.step(fmt.Sprintf("%s %s %s", phase, c.name, pt.label()))
			m, err := st.connMeasurePoint(ctx, c, t, pt, load.dur)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err != nil {
				tally.notes = append(tally.notes, fmt.Sprintf("%s %s %s: %v", phase, c.name, pt.label(), err))
				continue
			}
			tally.add(phase, c, pt, m)
		}
	}
	return nil
}

// connMeasurePoint measures one point of target t (spec c) in stage st:
// the forwarder's CPU around it, and for splicer its counters and /flows.
func (st *Env) connMeasurePoint(ctx context.Context, c connSpec, t *Target, pt connPoint, dur time.Duration) (connMeasure, error) {
	var m connMeasure
	var before map[string]float64
	if !t.Peer {
		var err error
		if before, err = st.spliceCounts(ctx); err != nil {
			return m, fmt.Errorf("splicer's /metrics: %w", err)
		}
	}
	run := func() error {
		if pt.tcp {
			r, err := loadgen.Connect(ctx, st.Dial, t.Addr(Echo), int(pt.size), pt.conns, dur)
			m.tool, m.rate, m.p50, m.p99, m.errors, m.firstErr, m.conns = "loadgen", r.CPS, r.P50, r.P99, r.Errors, r.FirstErr, r.Conns
			return err
		}
		r, err := st.wrkClose(ctx, c, t, pt, dur)
		m.tool, m.rate, m.p50, m.p99, m.errors, m.conns = "wrk", r.rps, r.p50, r.p99, int64(r.errors), r.requests
		return err
	}
	pids := t.Pids()
	start := sampleCPU(pids)
	var err error
	if t.Peer {
		err = run()
	} else {
		listener := c.name
		if pt.tcp {
			listener += "-echo"
		}
		m.flows, err = st.engineSeenOn(ctx, listener, run)
	}
	use := start.Since(pids)
	if err != nil {
		return m, err
	}
	if m.conns == 0 {
		return m, fmt.Errorf("no connection completed within %v (%d errors)", dur, m.errors)
	}
	if len(pids) > 0 {
		m.procUS, m.hasProc = perRequestMicros(use.Proc, m.conns), true
	}
	if before != nil {
		if m.splices, err = st.splicesSince(ctx, before); err != nil {
			return m, err
		}
	}
	return m, nil
}

// wrkClose runs wrk from st's client with Connection: close on every
// request, so each request is a connection of its own, against c's target
// t; through the forward proxy each request names the object by its
// absolute URI (a wrk script sets the path).
func (st *Env) wrkClose(ctx context.Context, c connSpec, t *Target, pt connPoint, dur time.Duration) (wrkResult, error) {
	obj := origin.ObjectPath(pt.size)
	args := []string{"-t" + strconv.Itoa(wrkThreads), "-c" + strconv.Itoa(pt.conns),
		"-d" + strconv.Itoa(int(dur.Round(time.Second).Seconds())) + "s", "--latency", "-H", "Connection: close"}
	if c.proxy == "http-forward" {
		script := filepath.Join(st.dir, "forward-"+sizeLabel(pt.size)+".lua")
		if err := os.WriteFile(script, []byte(fmt.Sprintf("wrk.path = %q\n", "http://"+st.addrs.switchOrigin+obj)), 0o644); err != nil {
			return wrkResult{}, err
		}
		args = append(args, "-s", script)
	}
	args = append(args, "http://"+t.switchAddr+obj)
	out, err := st.Client.Command(ctx, "wrk", args...).CombinedOutput()
	if err != nil {
		return wrkResult{}, fmt.Errorf("wrk: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return parseWrk(string(out))
}

// connTally collects connrate's points as samples, leaving out those of a
// listener pinned to an engine that did not carry them, and keeps the
// engines that carried each target's pairs.
type connTally struct {
	smp *samples
	// notes say what went differently: points left out, errors.
	notes []string
	// splices and conns add up each splicer target's splices per engine
	// and connections over both phases; flows are the engines /flows
	// showed for them.
	splices map[string]map[string]float64
	conns   map[string]int64
	flows   map[string]map[string]bool
	// labels are the points' labels in first-measured order.
	labels []string
}

func newConnTally() *connTally {
	return &connTally{smp: newSamples(), splices: map[string]map[string]float64{},
		conns: map[string]int64{}, flows: map[string]map[string]bool{}}
}

// connCarried is the share of a point's splices its pinned engine must
// have made for the point to be that engine's: a pair in a thousand that
// the engine declines (and the next one carries) does not make a point
// another engine's, a fifth does.
const connCarried = 0.99

// confirmed reports whether the pairs of a point through a listener pinned
// to engine were carried by it: splicer's counters moved for that engine,
// by at least connCarried of the point's splices, and /flows, where it
// caught a spliced pair, names it too.
func confirmed(engine string, splices map[string]float64, flows string) bool {
	if splices[engine] <= 0 || flows != "" && flows != engine {
		return false
	}
	var total float64
	for _, n := range splices {
		total += n
	}
	return splices[engine] >= connCarried*total
}

// add records point pt of target c measured in phase: its samples under
// the sequence's metric names, or alone_ ones; a point of a listener pinned
// to an engine counts only if that engine carried it (confirmed).
func (ct *connTally) add(phase string, c connSpec, pt connPoint, m connMeasure) {
	l := pt.label()
	if c.via == "splicer" {
		if c.engine != "auto" && !confirmed(c.engine, m.splices, m.flows) {
			ct.notes = append(ct.notes, fmt.Sprintf("%s %s %s: not carried by %s (splices counted: %s; /flows showed %q): point left out",
				phase, c.name, l, c.engine, describeSplices(m.splices), m.flows))
			return
		}
		ct.carry(c.name, m)
	}
	if !slices.Contains(ct.labels, l) {
		ct.labels = append(ct.labels, l)
	}
	prefix := ""
	if phase == phaseAlone {
		prefix = "alone_"
	}
	ct.smp.addBy(m.tool, c.name, prefix+"conn_s_"+l, "conn/s", m.rate)
	ct.smp.addBy(m.tool, c.name, prefix+"p50_ms_"+l, "ms", m.p50.Seconds()*1e3)
	ct.smp.addBy(m.tool, c.name, prefix+"p99_ms_"+l, "ms", m.p99.Seconds()*1e3)
	if m.hasProc {
		ct.smp.addBy(m.tool, c.name, prefix+"proc_cpu_us_"+l, "µs", m.procUS)
	}
	ct.smp.addBy(m.tool, c.name, prefix+"errors_"+l, "count", float64(m.errors))
	if m.errors > 0 {
		first := ""
		if m.firstErr != nil {
			first = ", first: " + m.firstErr.Error()
		}
		ct.notes = append(ct.notes, fmt.Sprintf("%s %s %s: %d error(s) (%s)%s", phase, c.name, l, m.errors, errorKind(m.tool), first))
	}
}

// errorKind says what a tool counts as errors.
func errorKind(tool string) string {
	if tool == "wrk" {
		return "wrk's socket errors and non-2xx responses"
	}
	return "failed connect/send/receive"
}

// carry adds a point's splices, connections and /flows engine to its
// target's.
func (ct *connTally) carry(name string, m connMeasure) {
	if ct.splices[name] == nil {
		ct.splices[name], ct.flows[name] = map[string]float64{}, map[string]bool{}
	}
	for en, n := range m.splices {
		ct.splices[name][en] += n
	}
	if m.flows != "" {
		ct.flows[name][m.flows] = true
	}
	ct.conns[name] += m.conns
}

// describeSplices lists splices per engine, most first: "ip 120, pipe 3".
func describeSplices(splices map[string]float64) string {
	if len(splices) == 0 {
		return "none"
	}
	ens := make([]string, 0, len(splices))
	for en := range splices {
		ens = append(ens, en)
	}
	sort.Slice(ens, func(i, j int) bool {
		if splices[ens[i]] != splices[ens[j]] {
			return splices[ens[i]] > splices[ens[j]]
		}
		return ens[i] < ens[j]
	})
	parts := make([]string, len(ens))
	for i, en := range ens {
		parts[i] = fmt.Sprintf("%s %.0f", en, splices[en])
	}
	return strings.Join(parts, ", ")
}

// result is the rows of targets, each point's sequence-to-alone ratio
// added, and the notes on them: the targets slowed by those before them
// and the engines that carried each splicer target's pairs.
func (ct *connTally) result(targets []string) ([]Row, []string) {
	var notes, slowed []string
	for _, t := range targets {
		for _, l := range ct.labels {
			seq, alone := ct.smp.get(t, "conn_s_"+l), ct.smp.get(t, "alone_conn_s_"+l)
			if len(seq) == 0 || len(alone) == 0 || alone[0] <= 0 {
				continue
			}
			r := seq[0] / alone[0]
			ct.smp.add(t, "seq_vs_alone_"+l, "x", r)
			if r < connSlowed {
				slowed = append(slowed, fmt.Sprintf("%s %s %.2fx", t, l, r))
			}
		}
	}
	if len(slowed) > 0 {
		notes = append(notes, fmt.Sprintf("slowed in sequence by the targets before it (conn/s below %.1fx its rate alone): %s", connSlowed, strings.Join(slowed, "; ")))
	} else {
		notes = append(notes, fmt.Sprintf("no target was slowed in sequence below %.1fx its rate alone", connSlowed))
	}
	for _, t := range targets {
		if _, ok := ct.conns[t]; ok {
			notes = append(notes, ct.carriedNote(t))
		}
	}
	return ct.smp.rows(targets), notes
}

// carriedNote says which engines carried a splicer target's pairs.
func (ct *connTally) carriedNote(t string) string {
	var seen []string
	for en := range ct.flows[t] {
		seen = append(seen, en)
	}
	slices.Sort(seen)
	flows := "no spliced pair caught in /flows"
	if len(seen) > 0 {
		flows = "/flows showed " + strings.Join(seen, ", ")
	}
	return fmt.Sprintf("%s: splices counted (splicer_splice_transitions_total, both phases, over %d completed connections): %s; %s",
		t, ct.conns[t], describeSplices(ct.splices[t]), flows)
}

// connMethodNotes say how connrate measured.
func connMethodNotes(dur time.Duration, lab bool) []string {
	stage := "a fresh lab (namespaces with no TIME_WAIT, reserved port or table of another target) with its own built-in and nginx origin"
	if !lab {
		stage = "loopback without the lab: the kernel's state is shared by every stage"
	}
	return []string{
		fmt.Sprintf("each point (target, object size, connections) measured for %v once alone and once in sequence; alone: %s and a forwarder process serving that target only; sequence: one such stage with one splicer process for every splicer target, one HAProxy for both of its, one nginx for both of its, the targets one after another in table order, each target's points in a row, so that what one leaves behind (TIME_WAIT, reserved ports, tables) meets the next; no other repetition (--runs does not apply)", dur, stage),
		"wrk -t2 -c16 / -c256 --latency -H 'Connection: close' from the client namespace: every request a connection of its own (closed by the server side); conn_s is wrk's requests/s; through auto-forward the request names the object by absolute URI (a wrk script). tcp1k points: loadgen (splicer-bench's Go load generator, not wrk) in a loop per connection: dial, send 1 KiB, read its echo, close (the client closes first), through the target's listener in front of the origin's echo",
		"copy, pipe, sockmap, ip, auto: splicer's tcp listener with that engine (auto: what a configuration without engine gets) in front of the nginx origin (HTTP) and the echo; auto-reverse, auto-forward: http-reverse (one pool) and http-forward (cache off) with engine auto; haproxy: HAProxy mode tcp; haproxy-http: mode http with keep-alive (the switch experiments' configuration); nginx-stream: nginx's stream proxy_pass (libnginx-mod-stream); nginx: http proxy_pass with upstream keepalive 64; route: no proxy, the origin reached through the forwarder namespace's routing",
		"seq_vs_alone: conn_s in sequence over conn_s alone (1.0: not slowed by the targets before it); alone_*: the same metrics alone. proc_cpu_us: the forwarder processes' user+system CPU per connection (none for route); errors: wrk's socket errors (connect, read, write, timeout) and non-2xx responses, or loadgen's failed transactions; p50_ms, p99_ms: wrk's latency percentiles, loadgen's dial-to-echo time",
		fmt.Sprintf("a point of copy, pipe, sockmap or ip counts only when that engine made at least %.0f%% of the splices splicer's counters counted during it and /flows, where it caught a spliced pair, named it too; else it is left out with a note", connCarried*100) + ". Bodies below 512 KiB are copied by http-reverse whatever the engine",
		"the client and forwarder namespaces reuse TIME_WAIT ports (net.ipv4.tcp_tw_reuse 1)",
		"sizes are KiB (1k = 1024 bytes); -cN: N concurrent connections",
	}
}

// pointFamilies are the columns of the experiments shown as a table per
// point (WriteMarkdown), a point being a metric name's last part.
var pointFamilies = map[string][]string{"connrate": connTableFamilies, "tls": tlsTableFamilies}

// pointTargets are, per experiment shown as a table per point, the
// targets every table has a line for, n/a where the target is
// unavailable; the others' tables have lines for measured targets only.
var pointTargets = map[string][]string{"tls": tlsTableTargets()}

// connTableFamilies are the columns of connrate's tables, a table per point.
var connTableFamilies = []string{"conn_s", "alone_conn_s", "seq_vs_alone", "p50_ms", "p99_ms", "proc_cpu_us", "errors"}

// writePointTables prints a table per point (metric names family_<point>):
// a line per target, a column per family.
func writePointTables(w io.Writer, r *Result, fams []string) {
	var points []string
	for _, row := range r.Rows {
		for _, fam := range fams {
			if l, ok := strings.CutPrefix(row.Metric, fam+"_"); ok && !strings.Contains(l, "_") && !slices.Contains(points, l) {
				points = append(points, l)
			}
		}
	}
	for _, pt := range points {
		var targets []string
		for _, row := range r.Rows {
			if strings.HasSuffix(row.Metric, "_"+pt) && !slices.Contains(targets, row.Engine) {
				targets = append(targets, row.Engine)
			}
		}
		fmt.Fprintf(w, "%s:\n\n| target |", pt)
		for _, fam := range fams {
			if u := unitOf(r, fam+"_"+pt); u != "" {
				fam += " (" + u + ")"
			}
			fmt.Fprintf(w, " %s |", fam)
		}
		fmt.Fprintf(w, "\n|---|%s\n", strings.Repeat("---:|", len(fams)))
		for _, t := range targets {
			line := "| " + t + " |"
			for _, fam := range fams {
				if row, ok := r.Row(t, fam+"_"+pt); ok && !math.IsNaN(row.Value) {
					line += " " + cell(row) + " |"
				} else {
					line += " n/a |"
				}
			}
			fmt.Fprintln(w, line)
		}
		for _, m := range r.Unavailable {
			if slices.Contains(pointTargets[r.Experiment], m.Engine) && !slices.Contains(targets, m.Engine) {
				fmt.Fprintf(w, "| %s |%s\n", m.Engine, strings.Repeat(" n/a |", len(fams)))
			}
		}
		fmt.Fprintln(w)
	}
	writeListed(w, r)
}

// splicesSince is splicer's splices per engine since its counters read
// before (spliceCounts), the engines with none left out.
func (st *Env) splicesSince(ctx context.Context, before map[string]float64) (map[string]float64, error) {
	after, err := st.spliceCounts(ctx)
	if err != nil {
		return nil, fmt.Errorf("splicer's /metrics: %w", err)
	}
	out := map[string]float64{}
	for en, v := range after {
		if d := v - before[en]; d > 0 {
			out[en] = d
		}
	}
	return out, nil
}
