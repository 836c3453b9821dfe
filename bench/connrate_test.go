// Tests of connrate's pieces that need no lab: its points, its rows and their alone-to-sequence ratio, the points left out when the pinned engine did not carry them, and its tables and configurations.

package bench

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"
)

// connSpecNamed returns the spec of name.
func connSpecNamed(tb testing.TB, name string) connSpec {
	tb.Helper()
	return find(tb, connSpecs, func(c connSpec) bool { return c.name == name }, "connrate target "+name)
}

// find returns the first of items that match takes, failing the test,
// which looked for what, when there is none.
func find[T any](tb testing.TB, items []T, match func(T) bool, what string) T {
	tb.Helper()
	i := slices.IndexFunc(items, match)
	if i < 0 {
		tb.Fatalf("no %s", what)
	}
	return items[i]
}

func TestConnPoints(t *testing.T) {
	var got []string
	for _, p := range connPoints(connSpecNamed(t, "haproxy"), connLoadOf(DefaultSettings())) {
		got = append(got, p.label())
	}
	want := []string{"1k-c16", "1k-c256", "64k-c16", "64k-c256", "tcp1k-c16", "tcp1k-c256"}
	if !slices.Equal(got, want) {
		t.Errorf("haproxy's points %v, want %v", got, want)
	}
	// An HTTP proxy relays requests, not bytes: no plain TCP point.
	if n := len(connPoints(connSpecNamed(t, "auto-reverse"), connLoadOf(DefaultSettings()))); n != 4 {
		t.Errorf("auto-reverse has %d points, want wrk's 4", n)
	}
}

func TestConnTallyRowsAndRatio(t *testing.T) {
	ct := newConnTally()
	pt := connPoint{size: 1 << 10, conns: 16}
	copySpec, nginx := connSpecNamed(t, "copy"), connSpecNamed(t, "nginx")
	carried := map[string]float64{"copy": 900}
	ct.add(phaseAlone, copySpec, pt, connMeasure{tool: "wrk", rate: 1000, p50: time.Millisecond, p99: 4 * time.Millisecond, conns: 1000, procUS: 30, hasProc: true, splices: carried, flows: "copy"})
	ct.add(phaseSequence, copySpec, pt, connMeasure{tool: "wrk", rate: 800, p50: 2 * time.Millisecond, p99: 9 * time.Millisecond, errors: 3, conns: 800, procUS: 35, hasProc: true, splices: carried})
	ct.add(phaseAlone, nginx, pt, connMeasure{tool: "wrk", rate: 500, conns: 500, procUS: 50, hasProc: true})
	ct.add(phaseSequence, nginx, pt, connMeasure{tool: "wrk", rate: 490, conns: 490, procUS: 50, hasProc: true})
	rows, notes := ct.result([]string{"copy", "nginx"})
	res := &Result{Experiment: "connrate", Rows: rows, Notes: notes}

	for _, c := range []struct {
		target, metric string
		want           float64
	}{
		{"copy", "conn_s_1k-c16", 800},
		{"copy", "alone_conn_s_1k-c16", 1000},
		{"copy", "seq_vs_alone_1k-c16", 0.8},
		{"copy", "p99_ms_1k-c16", 9},
		{"copy", "alone_p50_ms_1k-c16", 1},
		{"copy", "proc_cpu_us_1k-c16", 35},
		{"copy", "errors_1k-c16", 3},
		{"nginx", "seq_vs_alone_1k-c16", 0.98},
	} {
		row, ok := res.Row(c.target, c.metric)
		if !ok {
			t.Errorf("%s has no %s row", c.target, c.metric)
			continue
		}
		if diff := row.Value - c.want; diff > 1e-9 || diff < -1e-9 {
			t.Errorf("%s %s = %v, want %v", c.target, c.metric, row.Value, c.want)
		}
		if c.metric != "seq_vs_alone_1k-c16" && row.Tool != "wrk" {
			t.Errorf("%s %s measured by %q, want wrk", c.target, c.metric, row.Tool)
		}
	}
	if !slices.ContainsFunc(notes, func(n string) bool {
		return strings.Contains(n, "slowed in sequence") && strings.Contains(n, "copy 1k-c16 0.80x") && !strings.Contains(n, "nginx")
	}) {
		t.Errorf("no note names copy, and only copy, as slowed below 0.9x alone: %q", notes)
	}
	if !slices.ContainsFunc(ct.notes, func(n string) bool { return strings.Contains(n, "sequence copy 1k-c16: 3 error(s)") }) {
		t.Errorf("no note reports copy's errors in sequence: %q", ct.notes)
	}
	if !slices.ContainsFunc(notes, func(n string) bool {
		return strings.HasPrefix(n, "copy: splices counted") && strings.Contains(n, "over 1800 completed connections") && strings.Contains(n, "copy 1800") && strings.Contains(n, "/flows showed copy")
	}) {
		t.Errorf("no note says copy's pairs were carried by copy: %q", notes)
	}

	var md bytes.Buffer
	WriteMarkdown(&md, res)
	for _, want := range []string{"1k-c16:", "| target | conn_s (conn/s) | alone_conn_s (conn/s) | seq_vs_alone (x) |", "| copy | 800.0 | 1000 | 0.80 |"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, md.String())
		}
	}
}

func TestConnTallyDropsUnconfirmedEngine(t *testing.T) {
	ct := newConnTally()
	pt := connPoint{size: 1 << 10, conns: 16}
	ip, auto := connSpecNamed(t, "ip"), connSpecNamed(t, "auto")
	m := func(splices map[string]float64, flows string) connMeasure {
		return connMeasure{tool: "wrk", rate: 100, conns: 100, splices: splices, flows: flows}
	}
	ct.add(phaseAlone, ip, pt, m(map[string]float64{"pipe": 100}, "pipe"))            // fell back
	ct.add(phaseSequence, ip, pt, m(map[string]float64{"ip": 60, "pipe": 40}, "ip"))  // partly
	ct.add(phaseSequence, ip, connPoint{size: 1 << 10, conns: 256}, m(nil, ""))       // never spliced
	ct.add(phaseAlone, auto, pt, m(map[string]float64{"ip": 60, "pipe": 40}, "pipe")) // auto: whatever it picks
	rows, notes := ct.result([]string{"ip", "auto"})
	if i := slices.IndexFunc(rows, func(r Row) bool { return r.Engine == "ip" }); i >= 0 {
		t.Errorf("ip has a row (%s) though no point was carried by ip alone", rows[i].Metric)
	}
	if !slices.ContainsFunc(rows, func(r Row) bool { return r.Engine == "auto" && r.Metric == "alone_conn_s_1k-c16" }) {
		t.Errorf("auto's point was left out; auto is whichever engine it picks: %v", rows)
	}
	left := 0
	for _, n := range ct.notes {
		if strings.HasPrefix(n, "alone ip 1k-c16") || strings.HasPrefix(n, "sequence ip 1k-c") {
			left++
			if !strings.Contains(n, "point left out") {
				t.Errorf("note %q does not say the point was left out", n)
			}
		}
	}
	if left != 3 {
		t.Errorf("%d notes on ip's points left out, want 3: %q", left, ct.notes)
	}
	if !slices.ContainsFunc(notes, func(n string) bool {
		return strings.HasPrefix(n, "auto: splices counted") && strings.Contains(n, "over 100 completed connections") && strings.Contains(n, "ip 60, pipe 40")
	}) {
		t.Errorf("no note says which engines carried auto's pairs: %q", notes)
	}
}

func TestConfirmed(t *testing.T) {
	for _, c := range []struct {
		splices map[string]float64
		flows   string
		want    bool
	}{
		{map[string]float64{"ip": 10}, "ip", true},
		{map[string]float64{"ip": 10}, "", true}, // no pair caught in /flows: the counters decide
		{map[string]float64{"ip": 10}, "pipe", false},
		{map[string]float64{"ip": 10, "pipe": 1}, "ip", false},  // a tenth fell back
		{map[string]float64{"ip": 1000, "pipe": 1}, "ip", true}, // one pair in a thousand did
		{map[string]float64{}, "ip", false},
		{nil, "", false},
	} {
		if got := confirmed("ip", c.splices, c.flows); got != c.want {
			t.Errorf("confirmed(ip, %v, %q) = %v, want %v", c.splices, c.flows, got, c.want)
		}
	}
}

func TestConnConfigs(t *testing.T) {
	a := addressing{fwd: "10.99.1.1", server: "10.99.2.2", switchOrigin: "10.99.2.2:5007"}
	var specs []connSpec
	for _, name := range []string{"copy", "auto-forward", "haproxy", "haproxy-http", "nginx-stream", "nginx"} {
		specs = append(specs, connSpecNamed(t, name))
	}
	ts := connTargetsAt(a, specs)
	specOf := func(tt *Target) connSpec { return connSpecNamed(t, tt.Name) }
	sp := connSplicerConfig(a, ts[:2], specOf)
	for _, want := range []string{
		`{name: copy, listen: "10.99.1.1:9100", upstream: ["10.99.2.2:5007"], engine: copy,`,
		`{name: copy-echo, listen: "10.99.1.1:9150", upstream: ["10.99.2.2:5003"], engine: copy,`,
		`{name: auto-forward, listen: "10.99.1.1:9106", proxy: http-forward, engine: auto,`,
	} {
		if !strings.Contains(sp, want) {
			t.Errorf("splicer's configuration lacks %q:\n%s", want, sp)
		}
	}
	hp := connHAProxyConfig(a, ts[2:4], specOf)
	for _, want := range []string{"listen haproxy\n  bind 10.99.1.1:9110\n", "listen haproxy-echo\n  bind 10.99.1.1:9160\n", "listen haproxy-http\n  mode http\n"} {
		if !strings.Contains(hp, want) {
			t.Errorf("HAProxy's configuration lacks %q:\n%s", want, hp)
		}
	}
	ng := connNginxConfig("/d", a, ts[4:], specOf)
	if !strings.HasPrefix(ng, "load_module "+nginxStreamModule+";\n") {
		t.Errorf("nginx's configuration does not load the stream module first:\n%s", ng)
	}
	for _, want := range []string{"listen 10.99.1.1:9121;", "stream {\n\tserver { listen 10.99.1.1:9120; proxy_pass 10.99.2.2:5007; }"} {
		if !strings.Contains(ng, want) {
			t.Errorf("nginx's configuration lacks %q:\n%s", want, ng)
		}
	}
	if strings.Count(ng, "http {") != 1 {
		t.Errorf("nginx's configuration has not one http block:\n%s", ng)
	}
}

func TestConnratePlots(t *testing.T) {
	ct := newConnTally()
	for _, name := range []string{"copy", "haproxy"} {
		for _, pt := range connPoints(connSpecNamed(t, name), connLoadOf(DefaultSettings())) {
			m := connMeasure{tool: "wrk", rate: 1000, conns: 1000}
			if name == "copy" {
				m.splices = map[string]float64{"copy": 1000}
			}
			ct.add(phaseAlone, connSpecNamed(t, name), pt, m)
			m.rate = 900
			ct.add(phaseSequence, connSpecNamed(t, name), pt, m)
		}
	}
	rows, _ := ct.result([]string{"copy", "haproxy"})
	dir := t.TempDir()
	files, err := WritePlots(dir, []*Result{{Experiment: "connrate", Rows: rows}})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"connrate.png", "connrate_alone.png"} {
		if !slices.ContainsFunc(files, func(f string) bool { return strings.HasSuffix(f, "/"+want) }) {
			t.Errorf("plots %v lack %s", files, want)
		}
	}
}
