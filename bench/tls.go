// The tls experiment: wrk over https through SNI passthrough (splicer's tcp listener with tls_routes, engine auto) beside HAProxy (req.ssl_sni), nginx (ssl_preread) and the TLS origin direct, and through http-reverse terminating TLS beside HAProxy (bind ssl crt) and nginx (listen ssl).

package bench

import (
	"context"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/splicer/splicer/engine/all"
	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/origin"
)

// The two halves of the tls experiment.
const (
	// tlsPassthrough: the forwarder routes the connection by the
	// ClientHello's server name and relays it; the origin terminates TLS.
	tlsPassthrough = "passthrough"
	// tlsTermination: the forwarder terminates TLS and proxies HTTP to the
	// plain HTTP origin.
	tlsTermination = "termination"
)

// tlsSpec is one target of the tls experiment.
type tlsSpec struct {
	name string
	// via is the forwarder: "splicer", "haproxy", "nginx", or "" for
	// route (wrk to the TLS origin itself, through the forwarder
	// namespace's routing).
	via  string
	mode string
	port int
}

// tlsSpecs are the tls experiment's targets in table order, named as
// connrate's for the same listener kinds.
var tlsSpecs = []tlsSpec{
	{"auto", "splicer", tlsPassthrough, 9300},
	{"haproxy", "haproxy", tlsPassthrough, 9310},
	{"nginx-stream", "nginx", tlsPassthrough, 9320},
	{"route", "", tlsPassthrough, 0},
	{"auto-reverse", "splicer", tlsTermination, 9301},
	{"haproxy-http", "haproxy", tlsTermination, 9311},
	{"nginx", "nginx", tlsTermination, 9321},
}

// tlsAdmin is the admin endpoint of the tls experiment's splicer: apart
// from the Env's and connrate's, which share loopback with it without the
// lab.
const tlsAdmin = "127.0.0.1:9903"

// terminationNotBuilt is why auto-reverse has no rows while config.Parse
// refuses every spelling of the listener's tls block.
const terminationNotBuilt = "http-reverse TLS termination not built"

// tlsPoint is one measured point: wrk's GETs of an object of size bytes on
// keep-alive connections, or with close a connection (and a TLS handshake)
// per request.
type tlsPoint struct {
	size  int64
	close bool
}

// label names the point in metric names: 64k, 1k-close.
func (p tlsPoint) label() string {
	if p.close {
		return sizeLabel(p.size) + "-close"
	}
	return sizeLabel(p.size)
}

// tlsPointsOf are s's points: 1 KiB, 64 KiB and 1 MiB keep-alive and 1 KiB
// with Connection: close; --quick only 1 KiB and 1 MiB keep-alive.
func tlsPointsOf(s Settings) []tlsPoint {
	if s.TLSQuick {
		return []tlsPoint{{size: 1 << 10}, {size: 1 << 20}}
	}
	return []tlsPoint{{size: 1 << 10}, {size: 64 << 10}, {size: 1 << 20}, {size: 1 << 10, close: true}}
}

// tlsTarget is a started (or unavailable) target with its spec.
type tlsTarget struct {
	spec tlsSpec
	t    *Target
}

// TLS measures TLS through forwarders with wrk over https: SNI passthrough
// (splicer's tcp listener with tls_routes and engine auto, HAProxy mode tcp
// on req.ssl_sni, nginx stream with ssl_preread, and the TLS origin with no
// proxy) and TLS termination (http-reverse with a tls block, HAProxy's
// bind ssl crt, nginx's listen ssl) in front of the plain origin. It runs
// in a stage of its own (a fresh lab, its own origins and forwarder
// processes); a passthrough point of splicer counts only when ip spliced
// its pairs.
func TLS(ctx context.Context, e *Env, s Settings) (*Result, error) {
	res := &Result{Experiment: "tls"}
	if _, err := exec.LookPath("wrk"); err != nil {
		return nil, fmt.Errorf("wrk not installed (apt-get install wrk)")
	}
	points := tlsPointsOf(s)
	st, err := e.newStage(ctx, "tls", tlsSizes(points))
	if err != nil {
		return nil, fmt.Errorf("tls stage: %w", err)
	}
	defer st.Close()
	if st.tlsOrigin == "" {
		return nil, fmt.Errorf("no TLS origin (it is nginx's): the switch origin is %s", st.SwitchOrigin)
	}
	term := probeTermination(configAccepts, st.tlsFiles)
	var measured []tlsTarget
	for _, x := range st.startTLSForwarders(ctx, term, ipReason(e)) {
		if x.t.Unavailable != "" {
			res.Unavailable = append(res.Unavailable, Missing{x.t.Name, x.t.Unavailable})
		} else {
			measured = append(measured, x)
		}
	}
	cpus := splitCPUs(runtime.NumCPU(), s.Pin)
	unpin, err := cpus.apply(ctx, st, tlsTargets(measured))
	defer unpin()
	if err != nil {
		return nil, fmt.Errorf("pinning: %w", err)
	}
	dur := max(2*s.Duration, time.Second)
	tally := newTLSTally()
	p := newProgress(s.Progress, "tls", s.Runs*len(measured)*len(points))
	for run := 1; run <= s.Runs; run++ {
		for _, x := range measured {
			for _, pt := range points {
				what := fmt.Sprintf("run %d %s %s", run, x.t.Name, pt.label())
				p.step(what)
				if s.Warmup > 0 {
					st.tlsWrk(ctx, x.t, pt, s.Warmup, cpus.load)
				}
				m, err := st.tlsMeasurePoint(ctx, x, pt, dur, cpus.load)
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				if err != nil {
					tally.notes = append(tally.notes, fmt.Sprintf("%s: %v", what, err))
					continue
				}
				tally.add(what, x, pt, m)
			}
		}
	}
	p.finish()
	res.Rows = tally.smp.rows(names(tlsTargets(measured)))
	res.Rows = append(res.Rows, tlsRatios(res, points)...)
	res.Unavailable = append(res.Unavailable, unmeasured(tlsTargets(measured), res.Rows)...)
	res.Unavailable = append(res.Unavailable, tlsNotTargets...)
	res.Notes = append(res.Notes, tally.notes...)
	if n := tally.carriedNote(); n != "" {
		res.Notes = append(res.Notes, n)
	}
	if n := tlsBarsNote(res, points); n != "" {
		res.Notes = append(res.Notes, n)
	}
	res.Notes = append(res.Notes, tlsMethodNotes(s, dur, cpus, st.Lab != nil)...)
	return res, nil
}

// tlsSizes are the object sizes of points, each once.
func tlsSizes(points []tlsPoint) []int64 {
	var out []int64
	for _, p := range points {
		if !slices.Contains(out, p.size) {
			out = append(out, p.size)
		}
	}
	return out
}

// tlsTargets are xs' targets.
func tlsTargets(xs []tlsTarget) []*Target {
	out := make([]*Target, len(xs))
	for i, x := range xs {
		out[i] = x.t
	}
	return out
}

// tlsNotTargets are the other experiments' targets, each with why tls
// does not measure it.
var tlsNotTargets = []Missing{
	{"copy", "tls measures splicer's default engine (auto, whose passthrough pairs ip splices); the pinned engines are not measured"},
	{"pipe", "tls measures splicer's default engine (auto, whose passthrough pairs ip splices); the pinned engines are not measured"},
	{"sockmap", "tls measures splicer's default engine (auto, whose passthrough pairs ip splices); the pinned engines are not measured"},
	{"ip", "measured as auto: a passthrough point counts only when ip spliced its pairs"},
	{"haproxy-splice", "tls runs HAProxy as configured by default (haproxy: mode tcp with req.ssl_sni; haproxy-http: mode http with bind ssl crt)"},
	{"socat", "not a TLS router: it relays one address to one other"},
}

// ipReason is why engine ip cannot run here, "" if it can.
func ipReason(e *Env) string {
	if !slices.Contains(all.Names(), "ip") {
		return "not built yet"
	}
	probe := all.Build(defaultEngines(), e.log)
	defer probe.Close()
	return probe.Reason("ip")
}

// tlsTerminationShapes are the spellings of http-reverse's tls block the
// bench tries, in order, with the certificate and key files as %[1]q and
// %[2]q: the first that config.Parse accepts is what auto-reverse runs
// with (a binary that refuses them all has no TLS termination).
var tlsTerminationShapes = []string{
	`{certificates: [{cert_file: %[1]q, key_file: %[2]q}]}`,
}

// probeTermination returns the first of tlsTerminationShapes, filled with
// files, whose listener (tlsProbeConfig) accepts takes; "" when it takes
// none: TLS termination is not built.
func probeTermination(accepts func(yaml string) bool, files *tlsFiles) string {
	for _, shape := range tlsTerminationShapes {
		block := fmt.Sprintf(shape, files.cert, files.key)
		if accepts(tlsProbeConfig(block)) {
			return block
		}
	}
	return ""
}

// tlsProbeConfig is a configuration of one http-reverse listener with tls
// block (none for "").
func tlsProbeConfig(block string) string {
	l := `{name: probe, listen: "127.0.0.1:1", proxy: http-reverse, routes: [{pool: p}], pools: [{name: p, servers: ["127.0.0.1:2"]}]`
	if block != "" {
		l += ", tls: " + block
	}
	return "listeners:\n  - " + l + "}\n"
}

// configAccepts reports whether config.Parse takes the configuration.
func configAccepts(yaml string) bool {
	_, err := config.Parse("tls probe", []byte(yaml))
	return err == nil
}

// startTLSForwarders starts in st one process per forwarder for the
// targets of tlsSpecs: splicer (passthrough, and termination with the tls
// block term unless term is ""), HAProxy and nginx; ipWhy is why engine ip
// cannot run (the passthrough target is then unavailable). It returns
// every target, the unavailable ones saying why.
func (st *Env) startTLSForwarders(ctx context.Context, term, ipWhy string) []tlsTarget {
	out := tlsTargetsAt(st.addrs, st.tlsOrigin)
	by := map[string][]tlsTarget{}
	for _, x := range out {
		switch {
		case x.spec.via == "":
			continue
		case x.spec.via == "splicer" && x.spec.mode == tlsPassthrough && ipWhy != "":
			x.t.Unavailable = "passthrough is measured as engine auto splices it, with ip, which cannot run here: " + ipWhy
		case x.spec.via == "splicer" && x.spec.mode == tlsTermination && term == "":
			x.t.Unavailable = terminationNotBuilt
		case x.spec.via == "nginx" && x.spec.mode == tlsPassthrough:
			if _, err := os.Stat(nginxStreamModule); err != nil {
				x.t.Unavailable = "nginx's stream module is not installed (make bench-deps, or apt-get install libnginx-mod-stream)"
			}
		}
		if x.spec.via != "splicer" {
			if why := missing(x.spec.via); why != "" {
				x.t.Unavailable = why
			}
		}
		if x.t.Unavailable == "" {
			by[x.spec.via] = append(by[x.spec.via], x)
		}
	}
	for via, xs := range by {
		bin, args, err := st.writeTLSConfig(via, term, xs)
		if err != nil {
			markUnavailable(tlsTargets(xs), err.Error())
			continue
		}
		st.startConnProcess(ctx, via, bin, args, tlsTargets(xs))
	}
	if len(by["splicer"]) > 0 {
		st.AdminAddr = tlsAdmin
	}
	return out
}

// writeTLSConfig writes the configuration of forwarder via serving xs
// into st's directory and returns how to run it.
func (st *Env) writeTLSConfig(via, term string, xs []tlsTarget) (bin string, args []string, err error) {
	var cfg string
	path := filepath.Join(st.dir, "tls-"+via+".conf")
	switch via {
	case "splicer":
		cfg, bin, args = tlsSplicerConfig(st.addrs, st.tlsOrigin, term, xs), st.splicer, []string{"run", "--config", path}
	case "haproxy":
		cfg, bin, args = tlsHAProxyConfig(st.addrs, st.tlsOrigin, st.tlsFiles, xs), "haproxy", []string{"-db", "-f", path}
	case "nginx":
		dir := filepath.Join(st.dir, "tls-nginx")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", nil, err
		}
		cfg, bin, args = tlsNginxConfig(dir, st.addrs, st.tlsOrigin, st.tlsFiles, xs), "nginx", []string{"-c", path, "-p", dir}
	}
	return bin, args, os.WriteFile(path, []byte(cfg), 0o644)
}

// tlsTargetsAt makes a target of each of tlsSpecs in a stage addressed a:
// switchAddr is where wrk connects (the TLS side); route's is the TLS
// origin itself.
func tlsTargetsAt(a addressing, tlsOrigin string) []tlsTarget {
	out := make([]tlsTarget, len(tlsSpecs))
	for i, c := range tlsSpecs {
		t := &Target{Name: c.name, Peer: c.via != "splicer"}
		if c.via == "" {
			t.switchAddr = tlsOrigin
		} else {
			t.switchAddr = net.JoinHostPort(a.fwd, strconv.Itoa(c.port))
		}
		out[i] = tlsTarget{c, t}
	}
	return out
}

// tlsSplicerConfig is one splicer process with the listeners of xs: the
// passthrough target a tcp listener with engine auto routing
// tlsServerName, and nothing else, to the TLS origin; the termination
// target http-reverse with the tls block term in front of the plain
// switch origin.
func tlsSplicerConfig(a addressing, tlsOrigin, term string, xs []tlsTarget) string {
	cfg := "admin: " + tlsAdmin + "\nlog: {level: warn, format: text}\nshutdown_timeout: 1s\nlisteners:\n"
	for _, x := range xs {
		switch x.spec.mode {
		case tlsPassthrough:
			cfg += fmt.Sprintf("  - {name: %s, listen: %q, proxy: tcp, engine: auto, max_connections: 0, idle_timeout: 0s, tls_routes: [{server_name: %s, pool: origin}], pools: [{name: origin, servers: [%q]}]}\n",
				x.t.Name, x.t.switchAddr, tlsServerName, tlsOrigin)
		case tlsTermination:
			cfg += fmt.Sprintf("  - {name: %s, listen: %q, proxy: http-reverse, engine: auto, idle_timeout: 0s, routes: [{pool: origin}], pools: [{name: origin, servers: [%q]}], tls: %s}\n",
				x.t.Name, x.t.switchAddr, a.switchOrigin, term)
		}
	}
	return cfg
}

// tlsHAProxyConfig is one HAProxy process with the frontends of xs: mode
// tcp waiting for the ClientHello and sending tlsServerName, and nothing
// else, to the TLS origin (req.ssl_sni); mode http as the switch
// experiments' (haproxySwitch) with bind ssl crt, telling the origin the
// client came over https.
func tlsHAProxyConfig(a addressing, tlsOrigin string, files *tlsFiles, xs []tlsTarget) string {
	cfg := haproxyPreamble("")
	for _, x := range xs {
		name, addr := x.t.Name, x.t.switchAddr
		switch x.spec.mode {
		case tlsPassthrough:
			cfg += fmt.Sprintf(`frontend %[1]s
  bind %[2]s
  tcp-request inspect-delay 5s
  tcp-request content accept if { req.ssl_hello_type 1 }
  use_backend %[1]s-origin if { req.ssl_sni -i %[3]s }
backend %[1]s-origin
  server origin %[4]s
`, name, addr, tlsServerName, tlsOrigin)
		case tlsTermination:
			sw := haproxySwitch(addr+" ssl crt "+files.both, a.switchOrigin, 0)
			sw = strings.Replace(sw, "listen switch", "listen "+name, 1)
			sw = strings.ReplaceAll(sw, "proto=http;", "proto=https;")
			cfg += strings.Replace(sw, "X-Forwarded-Proto http\n", "X-Forwarded-Proto https\n", 1)
		}
	}
	return cfg
}

// tlsNginxConfig is one nginx process, its files in dir, with the servers
// of xs: stream with ssl_preread sending tlsServerName, and nothing else,
// to the TLS origin (the module from libnginx-mod-stream); proxy_pass as
// the switch experiments' (nginxConfig) listening with ssl, TLS 1.2 and
// 1.3 as the origin.
func tlsNginxConfig(dir string, a addressing, tlsOrigin string, files *tlsFiles, xs []tlsTarget) string {
	httpCfg, stream := nginxPreamble(dir)+"\n}\n", ""
	for _, x := range xs {
		addr := x.t.switchAddr
		switch x.spec.mode {
		case tlsTermination:
			httpCfg = strings.Replace(nginxConfig(dir, a.switchOrigin, addr), "listen "+addr+";",
				"listen "+addr+" ssl;\n\t\tssl_certificate "+files.cert+";\n\t\tssl_certificate_key "+files.key+";\n\t\tssl_protocols TLSv1.2 TLSv1.3;", 1)
		case tlsPassthrough:
			// A name the map lacks leaves $tls_origin empty: nginx then
			// closes the connection, as the other routers refuse it.
			stream = fmt.Sprintf("stream {\n\tmap $ssl_preread_server_name $tls_origin {\n\t\t%s %s;\n\t}\n\tserver { listen %s; ssl_preread on; proxy_pass $tls_origin; }\n}\n",
				tlsServerName, tlsOrigin, addr)
		}
	}
	if stream == "" {
		return httpCfg
	}
	return "load_module " + nginxStreamModule + ";\n" + httpCfg + stream
}

// tlsResolveScript is a wrk script that connects to ip whatever the URL's
// host. wrk sends the URL's host as SNI (and Host) and resolves it with
// getaddrinfo in the client namespace, which cannot resolve tlsServerName;
// the script replaces wrk.resolve, so the URL keeps the name for SNI and
// the connection goes to ip.
func tlsResolveScript(ip string) string {
	return fmt.Sprintf("-- connect to %[1]s; the URL's host stays the TLS server name (SNI) and Host\nwrk.resolve = function(host, service) wrk.addrs = wrk.lookup(%[1]q, service) end\n", ip)
}

// tlsWrkArgs are wrk's arguments for point pt at addr for dur with the
// resolve script: 2 threads, 16 connections, https://tlsServerName:port/.
func tlsWrkArgs(addr string, pt tlsPoint, dur time.Duration, script string) []string {
	_, port, _ := net.SplitHostPort(addr)
	args := []string{"-t" + strconv.Itoa(wrkThreads), "-c" + strconv.Itoa(wrkConns), "-d" + dur.String(), "--latency", "-s", script}
	if pt.close {
		args = append(args, "-H", "Connection: close")
	}
	return append(args, "https://"+net.JoinHostPort(tlsServerName, port)+origin.ObjectPath(pt.size))
}

// tlsWrk runs wrk from st's client at t for point pt for dur on cpus.
func (st *Env) tlsWrk(ctx context.Context, t *Target, pt tlsPoint, dur time.Duration, cpus []int) (wrkResult, error) {
	ip, _, err := net.SplitHostPort(t.switchAddr)
	if err != nil {
		return wrkResult{}, err
	}
	script := filepath.Join(st.dir, "resolve-"+ip+".lua")
	if err := os.WriteFile(script, []byte(tlsResolveScript(ip)), 0o644); err != nil {
		return wrkResult{}, err
	}
	return st.runWrk(ctx, cpus, tlsWrkArgs(t.switchAddr, pt, dur, script)...)
}

// tlsMeasure is what one point measured.
type tlsMeasure struct {
	wrk wrkResult
	use CPUUse
	// hasProc is false where no process forwards (route).
	hasProc bool
	// splices are splicer's splices per engine during the point; seen are
	// the engines /flows showed for spliced pairs of the target's
	// listener. Both unset for a peer.
	splices map[string]float64
	seen    []string
}

// tlsMeasurePoint measures point pt of x for dur: wrk, the CPU around it,
// and for splicer its splice counters and /flows.
func (st *Env) tlsMeasurePoint(ctx context.Context, x tlsTarget, pt tlsPoint, dur time.Duration, cpus []int) (tlsMeasure, error) {
	var m tlsMeasure
	splicer := x.spec.via == "splicer"
	var before map[string]float64
	if splicer {
		var err error
		if before, err = st.spliceCounts(ctx); err != nil {
			return m, fmt.Errorf("splicer's /metrics: %w", err)
		}
	}
	pids := x.t.Pids()
	start := sampleCPU(pids)
	run := func() (err error) {
		m.wrk, err = st.tlsWrk(ctx, x.t, pt, dur, cpus)
		return err
	}
	var err error
	if splicer {
		m.seen, err = st.enginesSeenOn(ctx, x.t.Name, run)
	} else {
		err = run()
	}
	m.use, m.hasProc = start.Since(pids), len(pids) > 0
	if err != nil {
		return m, err
	}
	if m.wrk.requests == 0 {
		return m, fmt.Errorf("no request completed within %v (%d errors)", dur, m.wrk.errors)
	}
	if splicer {
		if m.splices, err = st.splicesSince(ctx, before); err != nil {
			return m, err
		}
	}
	return m, nil
}

// promotedToIP reports whether ip carried a keep-alive point's pairs
// through a listener with engine auto, which starts every pair on
// all.AutoStart (copy) and promotes it to ip once it proves long: ip made
// at least connCarried as many splices as copy did (a pair each) and of
// all the splices past copy, and /flows showed ip for a pair.
func promotedToIP(splices map[string]float64, seen []string) bool {
	ip, past := splices["ip"], 0.0
	for en, n := range splices {
		if en != all.AutoStart {
			past += n
		}
	}
	return ip > 0 && ip >= connCarried*splices[all.AutoStart] && ip >= connCarried*past && slices.Contains(seen, "ip")
}

// tlsTally collects the tls experiment's points as samples, leaving out a
// keep-alive passthrough point of splicer that ip did not carry.
type tlsTally struct {
	smp *samples
	// notes say what went differently: points left out, errors.
	notes []string
	// splices and seen add up, per point label, the passthrough target's
	// splices per engine and the engines /flows showed, over its counted
	// points; labels are those labels in first-counted order.
	splices map[string]map[string]float64
	seen    map[string][]string
	labels  []string
	// passthrough is the name of splicer's passthrough target, once seen.
	passthrough string
}

func newTLSTally() *tlsTally {
	return &tlsTally{smp: newSamples(), splices: map[string]map[string]float64{}, seen: map[string][]string{}}
}

// add records point pt of x (what names it in notes): req/s, p50 and p99,
// every CPU's and the forwarder's CPU per request. A keep-alive
// passthrough point of splicer counts only if ip carried it
// (promotedToIP); with Connection: close its pairs end before auto's
// promotion thresholds and stay on copy, by design, as the note says.
func (tt *tlsTally) add(what string, x tlsTarget, pt tlsPoint, m tlsMeasure) {
	if x.spec.via == "splicer" && x.spec.mode == tlsPassthrough {
		if !pt.close && !promotedToIP(m.splices, m.seen) {
			tt.notes = append(tt.notes, fmt.Sprintf("%s: not carried by ip (splices counted: %s; /flows showed %s): point left out",
				what, describeSplices(m.splices), describeSeen(m.seen)))
			return
		}
		tt.carry(x.t.Name, pt.label(), m)
	}
	l, name, w := pt.label(), x.t.Name, m.wrk
	tt.smp.add(name, "rps_"+l, "req/s", w.rps)
	tt.smp.add(name, "p50_ms_"+l, "ms", w.p50.Seconds()*1e3)
	tt.smp.add(name, "p99_ms_"+l, "ms", w.p99.Seconds()*1e3)
	tt.smp.add(name, "cpu_us_"+l, "µs", perRequestMicros(m.use.Machine, w.requests))
	if m.hasProc {
		tt.smp.add(name, "proc_cpu_us_"+l, "µs", perRequestMicros(m.use.Proc, w.requests))
	}
	if w.errors > 0 {
		tt.notes = append(tt.notes, fmt.Sprintf("%s: wrk counted %d socket errors or non-2xx responses", what, w.errors))
	}
}

// carry adds a counted passthrough point's splices and engines seen to
// its label's.
func (tt *tlsTally) carry(name, label string, m tlsMeasure) {
	tt.passthrough = name
	if tt.splices[label] == nil {
		tt.splices[label] = map[string]float64{}
		tt.labels = append(tt.labels, label)
	}
	for en, n := range m.splices {
		tt.splices[label][en] += n
	}
	for _, en := range m.seen {
		if !slices.Contains(tt.seen[label], en) {
			tt.seen[label] = append(tt.seen[label], en)
		}
	}
}

// describeSeen lists the engines /flows showed.
func describeSeen(seen []string) string {
	if len(seen) == 0 {
		return "no spliced pair"
	}
	return strings.Join(seen, ", ")
}

// carriedNote says, per point, which engines carried the passthrough
// target's pairs; "" if none of its points counted.
func (tt *tlsTally) carriedNote() string {
	if tt.passthrough == "" {
		return ""
	}
	parts := make([]string, len(tt.labels))
	for i, l := range tt.labels {
		parts[i] = fmt.Sprintf("%s: splices %s, /flows showed %s", l, describeSplices(tt.splices[l]), describeSeen(tt.seen[l]))
	}
	return fmt.Sprintf("%s (passthrough), over its counted points (splicer_splice_transitions_total; engine auto starts a pair on copy and promotes it to ip past promote.after_bytes (192 KiB) or promote.after (200 ms), so a keep-alive pair counts on both): %s",
		tt.passthrough, strings.Join(parts, "; "))
}

// tlsComparisons set splicer's target of each half against the others of
// its half: HAProxy, nginx and (passthrough) the origin direct.
var tlsComparisons = []struct{ ours, haproxy, nginx, route string }{
	{"auto", "haproxy", "nginx-stream", "route"},
	{"auto-reverse", "haproxy-http", "nginx", ""},
}

// tlsRatios are rows comparing splicer's targets with the others of their
// half per point, from the medians of res: vs_route (req/s over the
// origin direct's), vs_best (over the better of HAProxy's and nginx's),
// vs_haproxy, p99_vs_haproxy and proc_cpu_vs_haproxy (the forwarder's CPU
// per request over HAProxy's).
func tlsRatios(res *Result, points []tlsPoint) []Row {
	var out []Row
	for _, c := range tlsComparisons {
		for _, pt := range points {
			l := pt.label()
			ours, ok := res.Row(c.ours, "rps_"+l)
			if !ok {
				continue
			}
			ratio := func(metric string, num, den float64) {
				if den > 0 && !math.IsNaN(num) {
					out = append(out, Row{Engine: c.ours, Metric: metric + "_" + l, Value: num / den, Min: num / den, Max: num / den, Unit: "x", Runs: ours.Runs, Tool: "wrk"})
				}
			}
			if r, ok := res.Row(c.route, "rps_"+l); ok {
				ratio("vs_route", ours.Value, r.Value)
			}
			best := 0.0
			for _, peer := range []string{c.haproxy, c.nginx} {
				if r, ok := res.Row(peer, "rps_"+l); ok {
					best = max(best, r.Value)
				}
			}
			ratio("vs_best", ours.Value, best)
			if h, ok := res.Row(c.haproxy, "rps_"+l); ok {
				ratio("vs_haproxy", ours.Value, h.Value)
			}
			p99, okA := res.Row(c.ours, "p99_ms_"+l)
			hp99, okB := res.Row(c.haproxy, "p99_ms_"+l)
			if okA && okB {
				ratio("p99_vs_haproxy", p99.Value, hp99.Value)
			}
			cpu, okA := res.Row(c.ours, "proc_cpu_us_"+l)
			hcpu, okB := res.Row(c.haproxy, "proc_cpu_us_"+l)
			if okA && okB {
				ratio("proc_cpu_vs_haproxy", cpu.Value, hcpu.Value)
			}
		}
	}
	return out
}

// tlsBar is one of the bars the TLS issue sets for a full run: target's
// ratio metric at the points labelled, at least or at most bar.
type tlsBar struct {
	target, metric string
	points         []string
	atLeast        bool
	bar            float64
}

// tlsBars are the TLS issue's bars: passthrough (auto) at least 0.95x the
// origin direct and 1.0x the better of HAProxy and nginx in req/s at every
// point, its CPU per request at most 0.25x HAProxy's at 64 KiB and 1 MiB;
// termination (auto-reverse) at least HAProxy's req/s with a p99 no
// higher at 1 and 64 KiB keep-alive, and 0.8x its handshakes per second.
var tlsBars = []tlsBar{
	{"auto", "vs_route", []string{"1k", "64k", "1m", "1k-close"}, true, 0.95},
	{"auto", "vs_best", []string{"1k", "64k", "1m", "1k-close"}, true, 1.0},
	{"auto", "proc_cpu_vs_haproxy", []string{"64k", "1m"}, false, 0.25},
	{"auto-reverse", "vs_haproxy", []string{"1k", "64k"}, true, 1.0},
	{"auto-reverse", "p99_vs_haproxy", []string{"1k", "64k"}, false, 1.0},
	{"auto-reverse", "vs_haproxy", []string{"1k-close"}, true, 0.8},
}

// tlsBarsNote says, for each bar at each of points, the median ratio and
// whether it is met, or that it was not measured; "" for no bar at
// points.
func tlsBarsNote(res *Result, points []tlsPoint) string {
	var parts []string
	for _, b := range tlsBars {
		for _, pt := range points {
			l := pt.label()
			if !slices.Contains(b.points, l) {
				continue
			}
			cmp, ok := "≥", true
			if !b.atLeast {
				cmp = "≤"
			}
			row, measured := res.Row(b.target, b.metric+"_"+l)
			switch {
			case !measured:
				parts = append(parts, fmt.Sprintf("%s %s %s (bar %s %.2f): not measured", b.target, b.metric, l, cmp, b.bar))
				continue
			case b.atLeast:
				ok = row.Value >= b.bar
			default:
				ok = row.Value <= b.bar
			}
			verdict := "met"
			if !ok {
				verdict = "NOT met"
			}
			parts = append(parts, fmt.Sprintf("%s %s %s %.2f %s %.2f: %s", b.target, b.metric, l, row.Value, cmp, b.bar, verdict))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "against the TLS issue's bars (medians; judged on a full run, not --quick): " + strings.Join(parts, "; ")
}

// tlsMethodNotes say how tls measured.
func tlsMethodNotes(s Settings, dur time.Duration, cpus cpuSplit, lab bool) []string {
	stage := "a fresh lab of its own"
	if !lab {
		stage = "loopback without the lab"
	}
	return []string{
		fmt.Sprintf("wrk -t%d -c%d -d%v --latency from the client namespace over https to %s (the SNI every router routes; wrk's SNI is the URL's host, and a wrk script replacing wrk.resolve connects to the target's address), %d run(s), targets interleaved, %s; cells are median (min–max); %s; in %s with one splicer, one HAProxy and one nginx process serving their targets of both halves",
			wrkThreads, wrkConns, dur, tlsServerName, s.Runs, describeWarmup(s.Warmup), cpus.describe(), stage),
		"passthrough (TLS terminated by the origin, nginx with an ECDSA P-256 certificate made at bench start, TLS 1.2 and 1.3): auto: splicer's tcp listener with tls_routes and engine auto (a keep-alive point counts only when ip took at least 99% of its pairs from copy, where auto starts them, and /flows showed ip; with Connection: close the pairs end before auto's promotion thresholds and stay on copy); haproxy: mode tcp with req.ssl_sni; nginx-stream: stream with ssl_preread; route: wrk to the TLS origin itself through the forwarder namespace's routing. Each router sends only that name on and refuses others",
		"termination (TLS terminated by the forwarder with the same certificate, HTTP to the plain nginx origin): auto-reverse: http-reverse with a tls block, engine auto; haproxy-http: mode http with bind ssl crt (the switch experiments' configuration); nginx: proxy_pass with upstream keepalive 64, listen ssl, TLS 1.2 and 1.3; each adds what http-reverse adds by default, proto https",
		"1k-close: wrk -H 'Connection: close', a connection and a TLS handshake per request: rps is handshakes per second. wrk keeps each connection's TLS session across its reconnections, so with servers that issue session tickets (all here, by default) the handshakes after each connection's first are resumptions (TLS 1.3 PSK with ECDHE)",
		"rps: wrk's requests/s; p50_ms, p99_ms: its latency percentiles; proc_cpu_us: the forwarder processes' user+system CPU per request (none for route; what the kernel does for ip's spliced pairs in softirq is charged to no process); cpu_us: every CPU's busy time per request (wrk and the origin's TLS included). vs_route, vs_best, vs_haproxy: req/s over the origin direct's, the better of HAProxy's and nginx's, HAProxy's, in the same half; p99_vs_haproxy, proc_cpu_vs_haproxy: p99 and proc_cpu_us over HAProxy's; ratios of the medians",
		"sizes are KiB and MiB (1k = 1024 bytes)",
	}
}

// tlsTableFamilies are the columns of tls's tables, a table per point.
var tlsTableFamilies = []string{"rps", "p99_ms", "proc_cpu_us", "cpu_us", "vs_route", "vs_best", "vs_haproxy", "p99_vs_haproxy", "proc_cpu_vs_haproxy"}

// tlsTableTargets are the targets each of tls's tables has a line for,
// n/a where unavailable.
func tlsTableTargets() []string {
	out := make([]string, len(tlsSpecs))
	for i, c := range tlsSpecs {
		out[i] = c.name
	}
	return out
}
