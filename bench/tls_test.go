// Tests of the tls experiment's pieces that need no lab: its points, the termination probe, the forwarders' configurations (checked by HAProxy and nginx themselves where installed), wrk's arguments, its rows, ratios and bars, and its tables.

package bench

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/splicer/splicer/internal/config"
	"github.com/splicer/splicer/origin"
)

// tlsTestAddrs are a stage's addresses as the lab's.
var tlsTestAddrs = addressing{fwd: "10.99.1.1", server: "10.99.2.2", switchOrigin: "10.99.2.2:5007"}

const tlsTestOrigin = "10.99.2.2:5008"

// tlsTestTargets are the targets of tlsSpecs at tlsTestAddrs, those of
// via only (all for "").
func tlsTestTargets(via string) []tlsTarget { return tlsTestTargetsAt(tlsTestAddrs, via) }

// tlsTestTargetsAt are the targets of tlsSpecs at a, those of via only
// (all for "").
func tlsTestTargetsAt(a addressing, via string) []tlsTarget {
	var out []tlsTarget
	for _, x := range tlsTargetsAt(a, tlsTestOrigin) {
		if via == "" || x.spec.via == via {
			out = append(out, x)
		}
	}
	return out
}

// testTLSFiles writes a certificate for tlsServerName into a directory
// removed when tb ends.
func testTLSFiles(tb testing.TB) *tlsFiles {
	tb.Helper()
	f, err := writeSelfSigned(tb.TempDir(), tlsServerName)
	if err != nil {
		tb.Fatal(err)
	}
	return f
}

func TestTLSPoints(t *testing.T) {
	labels := func(s Settings) []string {
		var out []string
		for _, p := range tlsPointsOf(s) {
			out = append(out, p.label())
		}
		return out
	}
	if got, want := labels(DefaultSettings()), []string{"1k", "64k", "1m", "1k-close"}; !slices.Equal(got, want) {
		t.Errorf("full run's points %v, want %v", got, want)
	}
	if got, want := labels(QuickSettings()), []string{"1k", "1m"}; !slices.Equal(got, want) {
		t.Errorf("--quick's points %v, want %v", got, want)
	}
}

// TestProbeTermination checks that the probe runs auto-reverse with the
// tls block this binary's configuration takes, given real certificate
// files, and with none (termination not built) when it takes none; and
// that its listener is one the configuration takes without the block, so
// that a refusal is the block's.
func TestProbeTermination(t *testing.T) {
	real, err := writeSelfSigned(t.TempDir(), "a.test")
	if err != nil {
		t.Fatal(err)
	}
	if got := probeTermination(configAccepts, real); !strings.HasPrefix(got, "{certificates: [{cert_file: ") {
		t.Errorf("with this binary's configuration: %q, want the certificates list", got)
	}
	files := &tlsFiles{cert: "/c.pem", key: "/k.pem"}
	if got := probeTermination(func(string) bool { return false }, files); got != "" {
		t.Errorf("with no block taken: %q, want none", got)
	}
	if _, err := config.Parse("probe", []byte(tlsProbeConfig(""))); err != nil {
		t.Errorf("the probe's listener without tls is refused: %v", err)
	}
	if _, err := config.Parse("probe", []byte(tlsProbeConfig("{no_such_key: 1}"))); err == nil {
		t.Errorf("the probe's listener takes a tls block of unknown keys: the probe would find termination built")
	}
}

// TestTLSSplicerConfig checks that the configuration parses and routes
// tlsServerName, and no other name, to the TLS origin with engine auto.
func TestTLSSplicerConfig(t *testing.T) {
	xs := slices.DeleteFunc(tlsTestTargets("splicer"), func(x tlsTarget) bool { return x.spec.mode == tlsTermination })
	cfg, err := config.Parse("tls", []byte(tlsSplicerConfig(tlsTestAddrs, tlsTestOrigin, "", xs)))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Listeners) != 1 {
		t.Fatalf("%d listeners, want the passthrough one", len(cfg.Listeners))
	}
	l := cfg.Listeners[0]
	if l.Name != "auto" || l.Listen != "10.99.1.1:9300" || l.Engine != "auto" || l.DefaultPool != "" {
		t.Errorf("listener %s on %s, engine %q, default_pool %q; want auto on 10.99.1.1:9300, engine auto, no default pool", l.Name, l.Listen, l.Engine, l.DefaultPool)
	}
	if len(l.TLSRoutes) != 1 || l.TLSRoutes[0].ServerName != tlsServerName || len(l.Pools) != 1 || l.TLSRoutes[0].Pool != l.Pools[0].Name {
		t.Fatalf("routes %+v, pools %+v; want %s to the one pool", l.TLSRoutes, l.Pools, tlsServerName)
	}
	if s := l.Pools[0].Servers; len(s) != 1 || s[0].Address != tlsTestOrigin {
		t.Errorf("pool's servers %+v, want the TLS origin %s", s, tlsTestOrigin)
	}
	// With termination built, its listener takes the probed block.
	all := tlsSplicerConfig(tlsTestAddrs, tlsTestOrigin, `{cert: "/c.pem", key: "/k.pem"}`, tlsTestTargets("splicer"))
	if !strings.Contains(all, `name: auto-reverse, listen: "10.99.1.1:9301", proxy: http-reverse`) || !strings.Contains(all, `servers: ["10.99.2.2:5007"]}], tls: {cert: "/c.pem", key: "/k.pem"}}`) {
		t.Errorf("no http-reverse listener with the tls block in front of the plain origin:\n%s", all)
	}
}

// TestTLSHAProxyConfig checks HAProxy's routing on SNI and its
// termination, and has HAProxy check the configuration where installed.
func TestTLSHAProxyConfig(t *testing.T) {
	files := testTLSFiles(t)
	cfg := tlsHAProxyConfig(tlsTestAddrs, tlsTestOrigin, files, tlsTestTargets("haproxy"))
	for _, want := range []string{
		"frontend haproxy\n  bind 10.99.1.1:9310\n",
		"tcp-request content accept if { req.ssl_hello_type 1 }",
		"use_backend haproxy-origin if { req.ssl_sni -i a.test }",
		"backend haproxy-origin\n  server origin 10.99.2.2:5008\n",
		"listen haproxy-http\n  mode http",
		"bind 10.99.1.1:9311 ssl crt " + files.both + "\n",
		`proto=https;`, "X-Forwarded-Proto https\n",
		"server origin 10.99.2.2:5007\n",
	} {
		if !strings.Contains(cfg, want) {
			t.Errorf("HAProxy's configuration lacks %q:\n%s", want, cfg)
		}
	}
	if strings.Contains(cfg, "default_backend") || strings.Contains(cfg, "proto=http;") {
		t.Errorf("HAProxy routes names other than a.test, or says the client came over http:\n%s", cfg)
	}
	if _, err := exec.LookPath("haproxy"); err != nil {
		t.Skip("haproxy not installed: its check of the configuration skipped")
	}
	// Addresses HAProxy's check need not bind.
	path := filepath.Join(t.TempDir(), "haproxy.cfg")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("haproxy", "-c", "-f", path).CombinedOutput(); err != nil {
		t.Errorf("haproxy -c: %v\n%s\n%s", err, out, cfg)
	}
}

// TestTLSNginxConfig checks nginx's routing on SNI and its termination,
// and has nginx check the configuration where installed.
func TestTLSNginxConfig(t *testing.T) {
	files := testTLSFiles(t)
	dir := t.TempDir()
	cfg := tlsNginxConfig(dir, tlsTestAddrs, tlsTestOrigin, files, tlsTestTargets("nginx"))
	for _, want := range []string{
		"load_module " + nginxStreamModule + ";\n",
		"map $ssl_preread_server_name $tls_origin {\n\t\ta.test 10.99.2.2:5008;\n\t}",
		"server { listen 10.99.1.1:9320; ssl_preread on; proxy_pass $tls_origin; }",
		"listen 10.99.1.1:9321 ssl;\n\t\tssl_certificate " + files.cert + ";\n\t\tssl_certificate_key " + files.key + ";\n\t\tssl_protocols TLSv1.2 TLSv1.3;",
		"upstream origin { server 10.99.2.2:5007; keepalive 64; }",
	} {
		if !strings.Contains(cfg, want) {
			t.Errorf("nginx's configuration lacks %q:\n%s", want, cfg)
		}
	}
	if strings.Contains(cfg, "default ") {
		t.Errorf("nginx routes names other than a.test:\n%s", cfg)
	}
	if why := missing("nginx"); why != "" {
		t.Skip(why)
	}
	if _, err := os.Stat(nginxStreamModule); err != nil {
		t.Skip("nginx's stream module not installed: its check of the configuration skipped")
	}
	// nginx -t binds its listeners: the same configuration on a loopback
	// address no other test listens on.
	local := tlsTestAddrs
	local.fwd = "127.0.0.5"
	cfg = tlsNginxConfig(dir, local, tlsTestOrigin, files, tlsTestTargetsAt(local, "nginx"))
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("nginx", "-t", "-c", path, "-p", dir).CombinedOutput(); err != nil {
		t.Errorf("nginx -t: %v\n%s\n%s", err, out, cfg)
	}
}

// TestTLSWrkArgs checks that wrk asks for the object by tlsServerName
// (its SNI) at the target's port, connecting through the resolve script
// to the target's address, with Connection: close only on close points.
func TestTLSWrkArgs(t *testing.T) {
	keep := tlsWrkArgs("10.99.1.1:9300", tlsPoint{size: 1 << 20}, time.Second, "/s.lua")
	want := []string{"-t2", "-c16", "-d1s", "--latency", "-s", "/s.lua", "https://a.test:9300" + origin.ObjectPath(1<<20)}
	if !slices.Equal(keep, want) {
		t.Errorf("keep-alive args %q, want %q", keep, want)
	}
	closing := tlsWrkArgs("10.99.2.2:5008", tlsPoint{size: 1 << 10, close: true}, time.Second, "/s.lua")
	if i := slices.Index(closing, "-H"); i < 0 || closing[i+1] != "Connection: close" || closing[len(closing)-1] != "https://a.test:5008"+origin.ObjectPath(1<<10) {
		t.Errorf("close args %q: want -H 'Connection: close' and https://a.test:5008/...", closing)
	}
	if s := tlsResolveScript("10.99.1.1"); !strings.Contains(s, `wrk.resolve = function(host, service) wrk.addrs = wrk.lookup("10.99.1.1", service) end`) {
		t.Errorf("resolve script does not connect to 10.99.1.1:\n%s", s)
	}
}

// tlsTestMeasure is a point's measure: rps req/s, p99 in ms, procUS of
// the forwarder's CPU per request, the splices and engines seen.
func tlsTestMeasure(rps float64, p99ms int, procUS float64, splices map[string]float64, seen ...string) tlsMeasure {
	const reqs = 1000
	return tlsMeasure{
		wrk:     wrkResult{rps: rps, p50: time.Millisecond, p99: time.Duration(p99ms) * time.Millisecond, requests: reqs},
		use:     CPUUse{Proc: time.Duration(procUS*reqs) * time.Microsecond, Machine: time.Duration(2*procUS*reqs) * time.Microsecond},
		hasProc: procUS > 0, splices: splices, seen: seen,
	}
}

func tlsTestTarget(tb testing.TB, name string) tlsTarget {
	tb.Helper()
	for _, x := range tlsTestTargets("") {
		if x.t.Name == name {
			return x
		}
	}
	tb.Fatalf("no tls target %s", name)
	return tlsTarget{}
}

// TestTLSTallyRatiosAndBars checks the rows of a run: a keep-alive
// passthrough point that ip did not carry left out with a note, a close
// point on copy counted; the ratios to the other targets of each half;
// and the note that holds them against the bars.
func TestTLSTallyRatiosAndBars(t *testing.T) {
	tt := newTLSTally()
	k1, m1, c1 := tlsPoint{size: 1 << 10}, tlsPoint{size: 1 << 20}, tlsPoint{size: 1 << 10, close: true}
	promoted := map[string]float64{"copy": 16, "ip": 16}
	auto := tlsTestTarget(t, "auto")
	tt.add("run 1 auto 1k", auto, k1, tlsTestMeasure(900, 10, 20, promoted, "copy", "ip"))
	tt.add("run 2 auto 1k", auto, k1, tlsTestMeasure(5000, 1, 1, map[string]float64{"copy": 16, "ip": 3, "pipe": 13}, "copy", "pipe"))
	tt.add("run 1 auto 1m", auto, m1, tlsTestMeasure(700, 40, 10, promoted, "ip"))
	tt.add("run 1 auto 1k-close", auto, c1, tlsTestMeasure(300, 50, 100, map[string]float64{"copy": 300}, "copy"))
	for _, p := range []struct {
		name          string
		pt            tlsPoint
		rps           float64
		p99ms         int
		procUS        float64
		forwarderless bool
	}{
		{"haproxy", k1, 960, 20, 40, false}, {"nginx-stream", k1, 950, 30, 30, false}, {"route", k1, 1000, 5, 0, true},
		{"haproxy", m1, 578, 60, 100, false}, {"nginx-stream", m1, 691, 50, 80, false}, {"route", m1, 733, 30, 0, true},
		{"haproxy", c1, 250, 70, 200, false},
		{"haproxy-http", k1, 1000, 8, 50, false}, {"nginx", k1, 900, 9, 60, false},
	} {
		tt.add("run 1 "+p.name, tlsTestTarget(t, p.name), p.pt, tlsTestMeasure(p.rps, p.p99ms, p.procUS, nil))
	}
	if !slices.ContainsFunc(tt.notes, func(n string) bool {
		return strings.Contains(n, "run 2 auto 1k: not carried by ip") && strings.Contains(n, "pipe 13") && strings.Contains(n, "left out")
	}) {
		t.Errorf("no note leaves out the 1k point pipe carried: %q", tt.notes)
	}
	if n := tt.carriedNote(); !strings.Contains(n, "1k: splices copy 16, ip 16, /flows showed copy, ip") || !strings.Contains(n, "1k-close: splices copy 300") {
		t.Errorf("carried note %q: want the counted points' engines per point", n)
	}
	targets := []string{"auto", "haproxy", "nginx-stream", "route", "haproxy-http", "nginx"}
	res := &Result{Experiment: "tls", Rows: tt.smp.rows(targets)}
	points := []tlsPoint{k1, m1, c1}
	res.Rows = append(res.Rows, tlsRatios(res, points)...)
	for _, c := range []struct {
		target, metric string
		want           float64
	}{
		{"auto", "rps_1k", 900}, // run 2 left out
		{"auto", "p99_ms_1k", 10},
		{"auto", "proc_cpu_us_1k", 20},
		{"auto", "cpu_us_1k", 40},
		{"auto", "vs_route_1k", 0.9},
		{"auto", "vs_best_1k", 900.0 / 960},
		{"auto", "vs_haproxy_1k", 900.0 / 960},
		{"auto", "p99_vs_haproxy_1k", 0.5},
		{"auto", "proc_cpu_vs_haproxy_1m", 0.1},
		{"auto", "vs_best_1m", 700.0 / 691},
		{"auto", "vs_haproxy_1k-close", 300.0 / 250},
		{"auto-reverse", "", 0},
		{"route", "vs_route_1k", 0},
		{"haproxy-http", "vs_haproxy_1k", 0},
	} {
		row, ok := res.Row(c.target, c.metric)
		if c.want == 0 {
			if ok || c.metric == "" && slices.ContainsFunc(res.Rows, func(r Row) bool { return r.Engine == c.target }) {
				t.Errorf("%s has a %s row: want none", c.target, c.metric)
			}
			continue
		}
		if !ok {
			t.Errorf("%s has no %s row", c.target, c.metric)
			continue
		}
		if d := row.Value - c.want; d > 1e-9 || d < -1e-9 {
			t.Errorf("%s %s = %v, want %v", c.target, c.metric, row.Value, c.want)
		}
	}
	if _, ok := res.Row("route", "proc_cpu_us_1k"); ok {
		t.Errorf("route has a forwarder CPU row: no process forwards for it")
	}
	note := tlsBarsNote(res, points)
	for _, want := range []string{
		"auto vs_route 1k 0.90 ≥ 0.95: NOT met",
		"auto vs_route 1m 0.95 ≥ 0.95: met", // 700/733 = 0.955
		"auto vs_best 1m 1.01 ≥ 1.00: met",
		"auto proc_cpu_vs_haproxy 1m 0.10 ≤ 0.25: met",
		"auto-reverse vs_haproxy 1k (bar ≥ 1.00): not measured",
		"auto-reverse vs_haproxy 1k-close (bar ≥ 0.80): not measured",
	} {
		if !strings.Contains(note, want) {
			t.Errorf("bars note lacks %q:\n%s", want, note)
		}
	}
	if strings.Contains(note, "64k") {
		t.Errorf("bars note names 64k, which was not measured:\n%s", note)
	}
}

// TestTLSTablesListUnavailable checks that every table of tls has a line
// for a target that did not run, n/a, and none for the other experiments'
// targets it lists as not its own.
func TestTLSTablesListUnavailable(t *testing.T) {
	res := &Result{Experiment: "tls",
		Rows: []Row{{Engine: "haproxy-http", Metric: "rps_1k", Value: 1000, Min: 1000, Max: 1000, Unit: "req/s", Runs: 1},
			{Engine: "haproxy-http", Metric: "rps_1m", Value: 90, Min: 90, Max: 90, Unit: "req/s", Runs: 1}},
		Unavailable: append([]Missing{{"auto-reverse", terminationNotBuilt}}, tlsNotTargets...)}
	var b bytes.Buffer
	WriteMarkdown(&b, res)
	out := b.String()
	if n := strings.Count(out, "| auto-reverse | n/a |"); n != 2 {
		t.Errorf("%d n/a lines for auto-reverse, want one in each of the 2 tables:\n%s", n, out)
	}
	if !strings.Contains(out, "- auto-reverse: n/a, "+terminationNotBuilt) {
		t.Errorf("no line says why auto-reverse is n/a:\n%s", out)
	}
	if strings.Contains(out, "| socat |") || strings.Contains(out, "| copy |") {
		t.Errorf("a table has a line for another experiment's target:\n%s", out)
	}
}
