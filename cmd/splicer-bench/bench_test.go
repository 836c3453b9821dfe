// Tests of `splicer bench`: the help names every experiment, and a quick run of all in the lab yields well-formed tables and JSON.

package main

import (
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/splicer/splicer/bench"
	"github.com/splicer/splicer/internal/testenv"
)

// requiredMetrics are the metrics every measured target must have, per
// experiment, as the issue names them.
var requiredMetrics = map[string][]string{
	"segment":     {"rr1_tps", "rr1460_tps", "cpu_us_per_txn"},
	"throughput":  {"gbps_1conn", "gbps_2conn", "gbps_3conn", "gbps_8conn", "cpu_s_per_gb"},
	"splice-cost": {"splice_us_p50", "splice_us_p99"},
	"memory":      {"bytes_per_pair_unspliced", "bytes_per_pair_spliced"},
	// --quick fetches 1, 64 and 128 KiB (web) and 1 KiB and 1 MiB (switch).
	"web": {"web_get_rps_1k", "web_get_cpu_us_1k", "web_get_p50_ms_1k", "web_get_rps_128k",
		"web_connect_rps_1k", "web_connect_cpu_us_1k", "web_connect_p50_ms_1k", "web_connect_rps_128k",
		// wrk, the field's load generator, beside ours.
		"wrk_rps_1k", "wrk_p50_ms_1k", "wrk_p99_ms_1k", "wrk_rps_1m", "wrk_p99_ms_1m", "wrk_cpu_us_1k", "wrk_proc_cpu_us_1k"},
	"switch": {"switch_p50_ms_1k", "switch_p99_ms_1k", "switch_gbps_1k", "switch_p50_ms_1m", "switch_gbps_1m"},
	"idle":   {"pairs_spliced", "pairs_echoing", "fds", "rss_bytes_per_pair"},
	"iprate": {"pairs_per_s", "spliced_per_s", "fallbacks", "fds_max", "cpu_us_per_pair", "client_cpu_us_per_pair", "origin_cpu_us_per_pair"},
	// --quick moves 1 KiB, 1 MiB and 16 MiB per transfer.
	"crossover": {"proc_cpu_us_1k", "proc_cpu_us_1m", "proc_cpu_us_16m", "wall_ms_1k",
		"http_proc_cpu_us_1k", "http_proc_cpu_us_16m", "http_wall_ms_1k"},
}

func TestBenchHelp(t *testing.T) {
	_, stderr, code := splicer(t, "bench", "-h")
	if code != 0 {
		t.Fatalf("splicer bench -h: exit %d", code)
	}
	for _, x := range bench.Experiments {
		if !strings.Contains(stderr, x.Name) {
			t.Errorf("help does not mention experiment %s", x.Name)
		}
	}
	for _, want := range []string{"--json", "--plot", "--quick", "--runs", "softirq", `"metric"`} {
		if !strings.Contains(stderr, strings.TrimPrefix(want, "--")) {
			t.Errorf("help does not mention %s", want)
		}
	}
}

func TestBenchUnknownExperiment(t *testing.T) {
	_, stderr, code := splicer(t, "bench", "nosuch")
	if code == 0 || !strings.Contains(stderr, `unknown experiment "nosuch"`) {
		t.Errorf("splicer bench nosuch: exit %d, stderr %q; want a failure naming the experiment", code, stderr)
	}
}

func TestBenchNegativeWarmup(t *testing.T) {
	_, stderr, code := splicer(t, "bench", "web", "--warmup", "-1s")
	if code == 0 || !strings.Contains(stderr, "--warmup -1s: must be 0s (none) or more") {
		t.Errorf("splicer bench web --warmup -1s: exit %d, stderr %q; want a failure naming the flag", code, stderr)
	}
}

// TestBenchCC: --cc sets the lab's congestion control, and the notes say
// which one the run used; an unknown one fails before anything runs, with
// what the host offers. reno is built into every kernel and allowed in
// every namespace.
func TestBenchCC(t *testing.T) {
	testenv.RequireRoot(t)
	r, _ := benchOne(t, "memory", "--quick", "--cc", "reno")
	if !slices.ContainsFunc(r.Notes, func(n string) bool { return strings.HasPrefix(n, "TCP congestion control: reno (chosen with --cc") }) {
		t.Errorf("notes do not say the run used reno, chosen with --cc: %q", r.Notes)
	}
	_, stderr, code := splicer(t, "bench", "memory", "--quick", "--cc", "nosuchcc")
	if code == 0 || !strings.Contains(stderr, "--cc nosuchcc") || !strings.Contains(stderr, "available: ") {
		t.Errorf("--cc nosuchcc: exit %d, stderr %q; want a failure naming it and what is available", code, stderr)
	}
}

// TestBenchAllQuick runs every experiment once, briefly, in the lab and
// checks what a reader of the JSON relies on: every experiment present,
// rows for every target that can run here, sane values, and web's wrk
// rows warmed up as --warmup asks. It asserts no speed.
func TestBenchAllQuick(t *testing.T) {
	testenv.RequireRoot(t)
	out := filepath.Join(t.TempDir(), "bench.json")
	plots := filepath.Join(t.TempDir(), "plots")
	stdout, stderr, code := splicer(t, "bench", "all", "--quick", "--warmup", "100ms", "--json", out, "--plot", plots)
	if code != 0 {
		t.Fatalf("splicer bench all --quick --warmup 100ms: exit %d\nstderr:\n%s", code, stderr)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var results []bench.Result
	if err := json.Unmarshal(b, &results); err != nil {
		t.Fatalf("--json output is not an array of results: %v", err)
	}
	var got []string
	for _, r := range results {
		got = append(got, r.Experiment)
	}
	var want []string
	for _, x := range bench.Experiments {
		want = append(want, x.Name)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("experiments %v, want %v", got, want)
	}

	measured := targetsWithRows(results[0])
	for _, name := range []string{"copy", "pipe", "route"} {
		if !measured[name] {
			t.Errorf("segment has no rows for %s, which runs on every host with the lab", name)
		}
	}
	checkToolRows(t, results[0], "sockperf", "sockperf14_avg_us", "sockperf14_p99_us", "sockperf1460_avg_us", "sockperf1460_p99_us")
	checkToolRows(t, results[1], "iperf3", "iperf3_gbps_1conn", "iperf3_gbps_8conn")
	for _, r := range results {
		t.Run(r.Experiment, func(t *testing.T) {
			if !strings.Contains(stdout, "### "+r.Experiment) {
				t.Errorf("stdout has no table for %s", r.Experiment)
			}
			if r.Pending != "" {
				if len(r.Rows) > 0 {
					t.Errorf("pending experiment has rows")
				}
				return
			}
			checkResult(t, r, measured)
		})
	}
	if !strings.Contains(stdout, "each after an unmeasured 100ms wrk run at the same target and size") {
		t.Errorf("web's notes do not say its wrk runs were warmed up for 100ms")
	}
	if !strings.Contains(stdout, "### headline") {
		t.Errorf("stdout of all has no headline table")
	}
	again, stderr, code := splicer(t, "bench", "--from", out)
	if code != 0 || !strings.Contains(again, "### segment") || !strings.Contains(again, "### headline") {
		t.Errorf("splicer bench --from %s: exit %d, stderr %s; want the tables again:\n%s", out, code, stderr, again)
	}
	for _, f := range []string{"segment_tps.png", "throughput_gbps.png", "splice_trace.png", "memory.png", "web_get_rps.png", "web_connect_rps.png", "switch_p50.png"} {
		if st, err := os.Stat(filepath.Join(plots, f)); err != nil || st.Size() == 0 {
			t.Errorf("plot %s missing or empty: %v", f, err)
		}
	}
}

// TestBenchCrossoverQuick runs crossover alone, briefly, in the lab: each
// engine has its CPU per transfer at every size in both modes, ip has a
// crossover with copy in both (where the promote.after_bytes and min_body
// defaults come from), within the sizes measured, and the plots are
// written. It asserts no speed and no particular crossover.
func TestBenchCrossoverQuick(t *testing.T) {
	testenv.RequireRoot(t)
	plots := filepath.Join(t.TempDir(), "plots")
	r, stdout := benchOne(t, "crossover", "--quick", "--plot", plots)
	for _, en := range []string{"copy", "pipe", "ip"} {
		for _, m := range requiredMetrics["crossover"] {
			if _, ok := r.Row(en, m); !ok {
				t.Errorf("%s has no %s row", en, m)
			}
		}
	}
	for _, m := range []string{"crossover_copy_kib", "http_crossover_copy_kib"} {
		row, ok := r.Row("ip", m)
		if !ok {
			t.Errorf("ip has no %s row: no crossover found\n%s", m, stdout)
			continue
		}
		if row.Value < 1 || row.Value > 16<<10 {
			t.Errorf("%s = %v KiB, outside the sizes measured (1 KiB to 16 MiB)", m, row.Value)
		}
	}
	for _, row := range r.Rows {
		checkRow(t, row)
	}
	if !strings.Contains(stdout, "crossover_copy_kib (KiB)") {
		t.Errorf("stdout has no crossover table:\n%s", stdout)
	}
	for _, f := range []string{"crossover_tcp.png", "crossover_http.png"} {
		if st, err := os.Stat(filepath.Join(plots, f)); err != nil || st.Size() == 0 {
			t.Errorf("plot %s missing or empty: %v", f, err)
		}
	}
}

// TestBenchThroughputQuick runs throughput alone, briefly, in the lab:
// every target, auto (a tcp listener with no engine) included, has its
// loadgen and iperf3 rows or a reason for none, and auto's note says its
// pairs ended on ip (promoted from copy). It asserts no speed.
func TestBenchThroughputQuick(t *testing.T) {
	testenv.RequireRoot(t)
	r, stdout := benchOne(t, "throughput", "--quick")
	checkResult(t, r, targetsWithRows(r))
	checkToolRows(t, r, "iperf3", "iperf3_gbps_1conn", "iperf3_gbps_8conn")
	if !strings.Contains(stdout, "| auto |") && !slices.ContainsFunc(r.Unavailable, func(m bench.Missing) bool { return m.Engine == "auto" }) {
		t.Errorf("the table has no auto line:\n%s", stdout)
	}
}

// checkAuto checks throughput's auto target: rows or a reason for none,
// and with rows a note saying ip carried its one-connection pairs at the
// end, so that a promotion that stopped working shows.
func checkAuto(t *testing.T, r bench.Result, rows, unavailable map[string]bool) {
	t.Helper()
	if !rows["auto"] {
		if !unavailable["auto"] {
			t.Errorf("auto neither has rows nor is listed unavailable")
		}
		return
	}
	i := slices.IndexFunc(r.Notes, func(n string) bool { return strings.HasPrefix(n, "auto: ") })
	if i < 0 {
		t.Errorf("no note says which engine carried auto's pairs: %q", r.Notes)
		return
	}
	if !strings.Contains(r.Notes[i], "gbps_1conn: ip ") {
		t.Errorf("auto's one-connection pairs did not end on ip (not promoted): %s", r.Notes[i])
	}
}

// checkResult checks one experiment: every target accounted for, the
// required metrics for every measured target, sane rows.
func checkResult(t *testing.T, r bench.Result, measured map[string]bool) {
	t.Helper()
	if !slices.ContainsFunc(r.Notes, func(n string) bool { return strings.HasPrefix(n, "TCP congestion control: ") }) {
		t.Errorf("no note names the TCP congestion control the run used: %q", r.Notes)
	}
	rows := targetsWithRows(r)
	unavailable := map[string]bool{}
	for _, m := range r.Unavailable {
		unavailable[m.Engine] = true
		if m.Reason == "" {
			t.Errorf("%s unavailable without a reason", m.Engine)
		}
	}
	if ipOnly[r.Experiment] {
		if len(rows) == 0 && !unavailable["ip"] {
			t.Errorf("ip neither has rows nor is listed unavailable")
		}
		for name := range rows { // "ip", or "ip, N pairs" (idle)
			if !strings.HasPrefix(name, "ip") {
				t.Errorf("%s has rows in an experiment of engine ip alone", name)
			}
			for _, m := range requiredMetrics[r.Experiment] {
				if _, ok := r.Row(name, m); !ok {
					t.Errorf("%s has no %s row", name, m)
				}
			}
		}
		for _, row := range r.Rows {
			checkRow(t, row)
		}
		return
	}
	for _, name := range append(slices.Clone(bench.Engines), bench.Peers...) {
		if !rows[name] && !unavailable[name] {
			t.Errorf("%s neither has rows nor is listed unavailable", name)
		}
	}
	if r.Experiment == "throughput" {
		checkAuto(t, r, rows, unavailable)
	}
	if r.Experiment == "web" {
		// wrk's switch-only targets: splicer's default engine and the
		// peers that serve HTTP alone.
		for _, name := range []string{"auto", "nginx", "haproxy-buf256k"} {
			if !rows[name] && !unavailable[name] {
				t.Errorf("%s neither has wrk rows nor is listed unavailable", name)
			}
		}
	}
	for _, name := range bench.Engines {
		// tls measures splicer's auto (passed through, promoted to ip)
		// and http-reverse, not each engine; crossover weighs copy and
		// pipe against ip.
		if measured[name] && !rows[name] && r.Experiment != "tls" && r.Experiment != "crossover" {
			t.Errorf("engine %s ran in segment but has no rows here", name)
		}
	}
	for _, name := range bench.Peers {
		// switch's peers, and web's in its wrk rows, are the HAProxy pair in
		// HTTP mode and route, the origin reached with no proxy.
		applies := r.Experiment == "segment" || r.Experiment == "throughput" ||
			(r.Experiment == "switch" || r.Experiment == "web") && (strings.HasPrefix(name, "haproxy") || name == "route")
		if applies && measured[name] && !rows[name] {
			t.Errorf("peer %s ran in segment but has no rows here", name)
		}
	}
	for name := range rows {
		for _, m := range requiredMetrics[r.Experiment] {
			if strings.HasPrefix(m, "web_") && !slices.Contains(bench.Engines, name) {
				continue // the forward-proxy rows are splicer's alone; peers have wrk rows
			}
			if _, ok := r.Row(name, m); !ok {
				t.Errorf("%s has no %s row", name, m)
			}
		}
	}
	for _, row := range r.Rows {
		checkRow(t, row)
	}
}

// checkToolRows checks that every target with rows in r has each of
// metrics measured by tool, where tool is installed.
func checkToolRows(t *testing.T, r bench.Result, tool string, metrics ...string) {
	t.Helper()
	if _, err := exec.LookPath(tool); err != nil {
		t.Logf("%s not installed: %s's %s rows not checked", tool, r.Experiment, tool)
		return
	}
	for name := range targetsWithRows(r) {
		for _, m := range metrics {
			row, ok := r.Row(name, m)
			if !ok || row.Tool != tool {
				t.Errorf("%s: %s has no %s row measured by %s (%+v)", r.Experiment, name, m, tool, row)
			}
		}
	}
}

// ipOnly are the experiments that measure engine ip alone: many idle
// pairs at once, and new pairs at a rate past its port range.
var ipOnly = map[string]bool{"idle": true, "iprate": true}

// rightlyZero are iprate's counts of what should not happen, or need not:
// fallbacks, refused picks, ports taken again (none while the range
// suffices) and errors.
var rightlyZero = map[string]bool{"fallbacks": true, "local_ports_exhausted": true, "local_ports_reused": true, "errors": true}

func checkRow(t *testing.T, row bench.Row) {
	t.Helper()
	id := row.Engine + " " + row.Metric
	if row.Tool == "" {
		t.Errorf("%s: no tool named: every row says what measured it", id)
	}
	if row.Unit == "" || row.Runs < 1 {
		t.Errorf("%s: unit %q, runs %d; want a unit and runs >= 1", id, row.Unit, row.Runs)
	}
	if math.IsNaN(row.Value) || math.IsInf(row.Value, 0) || row.Min > row.Value || row.Value > row.Max {
		t.Errorf("%s: value %v outside min %v .. max %v", id, row.Value, row.Min, row.Max)
	}
	// The kernel share is a difference of accounted objects: once the ip
	// engine closed the forwarder's sockets it is zero, or a few bytes
	// below when the process also dropped a descriptor it held before.
	if strings.HasPrefix(row.Metric, "kernel_") {
		return
	}
	// A pair spliced by ip keeps no socket, goroutine or buffer of the
	// process (detached): what it adds to the process is its share of a
	// few maps, within a page of the process's own drift either way.
	if (strings.HasPrefix(row.Metric, "rss_") || strings.HasPrefix(row.Metric, "bytes_")) && strings.Contains(row.Metric, "per_pair_spliced") && row.Engine == "ip" {
		if row.Value < -4096 {
			t.Errorf("%s: value %v, want more than -4096 (a page of drift)", id, row.Value)
		}
		return
	}
	// Some shares are rightly zero: no BPF maps (copy), no process time
	// when the kernel forwards (ip, within the 10 ms tick), no errors
	// (connrate). Everything else is a rate, a time or a size of something
	// that happened.
	if rightlyZero[row.Metric] {
		if row.Value < 0 {
			t.Errorf("%s: value %v, want >= 0", id, row.Value)
		}
		return
	}
	for _, share := range []string{"bpf_", "proc_", "errors_"} {
		if strings.HasPrefix(row.Metric, share) || strings.Contains(row.Metric, "_"+share) {
			if row.Value < 0 {
				t.Errorf("%s: value %v, want >= 0", id, row.Value)
			}
			return
		}
	}
	if row.Value <= 0 {
		t.Errorf("%s: value %v, want > 0", id, row.Value)
	}
}

func targetsWithRows(r bench.Result) map[string]bool {
	m := map[string]bool{}
	for _, row := range r.Rows {
		m[row.Engine] = true
	}
	return m
}
