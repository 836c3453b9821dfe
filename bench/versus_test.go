// versusNote: the ratio, the p99s and the tie marks from rows whose ranges do and do not overlap; ceilingNote: each target's share of route's rate.

package bench

import "testing"

func TestVersusNote(t *testing.T) {
	res := &Result{Rows: []Row{
		{Engine: "auto", Metric: "wrk_rps_1k", Value: 980, Min: 950, Max: 1010},
		{Engine: "haproxy", Metric: "wrk_rps_1k", Value: 1000, Min: 990, Max: 1020},
		{Engine: "auto", Metric: "wrk_p99_ms_1k", Value: 3.3, Min: 2.4, Max: 3.6},
		{Engine: "haproxy", Metric: "wrk_p99_ms_1k", Value: 3.1, Min: 2.2, Max: 3.5},
		{Engine: "auto", Metric: "wrk_rps_1m", Value: 1600, Min: 1560, Max: 1750},
		{Engine: "haproxy", Metric: "wrk_rps_1m", Value: 700, Min: 690, Max: 720},
		{Engine: "auto", Metric: "wrk_p99_ms_1m", Value: 26.4, Min: 26.1, Max: 50.7},
		{Engine: "haproxy", Metric: "wrk_p99_ms_1m", Value: 40.1, Min: 35.7, Max: 42.8},
	}}
	got := versusNote(res, []int64{1 << 10, 10 << 10, 1 << 20}, "auto", "haproxy")
	want := `auto against haproxy (wrk, medians; "(tie)": the runs' min–max ranges overlap): 1k: 0.98x (tie), p99 3.3 / 3.1 ms (tie); 1m: 2.29x, p99 26.4 / 40.1 ms (tie)`
	if got != want {
		t.Errorf("versusNote:\n got %s\nwant %s", got, want)
	}
	if got := versusNote(res, []int64{10 << 10}, "auto", "haproxy"); got != "" {
		t.Errorf("versusNote with no rows for the size = %q, want empty", got)
	}
}

func TestCeilingNote(t *testing.T) {
	res := &Result{Rows: []Row{
		{Engine: "route", Metric: "wrk_rps_64k", Value: 12500},
		{Engine: "auto", Metric: "wrk_rps_64k", Value: 10000},
		{Engine: "haproxy", Metric: "wrk_rps_64k", Value: 8750},
		{Engine: "auto", Metric: "wrk_rps_1m", Value: 1600},
	}}
	got := ceilingNote(res, []int64{64 << 10, 1 << 20}, "route", "auto", "haproxy", "nginx")
	want := "share of route's rate (wrk, medians; route: the client reaches the origin through the forwarder namespace's kernel routing, no proxy between; a proxy beats it only where two shorter TCP connections open their windows faster than one): 64k: 12500 req/s; auto 0.80, haproxy 0.70"
	if got != want {
		t.Errorf("ceilingNote:\n got %s\nwant %s", got, want)
	}
	if got := ceilingNote(res, []int64{1 << 20}, "route", "auto"); got != "" {
		t.Errorf("ceilingNote with no route row = %q, want empty", got)
	}
}
