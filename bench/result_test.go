// Tests of result summaries and their rendering: medians, ranges, JSON shape, Markdown cells.

package bench

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestSummarizeMedianAndRange(t *testing.T) {
	for _, tc := range []struct {
		vals          []float64
		med, min, max float64
	}{
		{[]float64{3}, 3, 3, 3},
		{[]float64{5, 1, 3}, 3, 1, 5},
		{[]float64{4, 1, 3, 2}, 2.5, 1, 4},
	} {
		r := summarize("copy", "rr1_tps", "txn/s", tc.vals)
		if r.Value != tc.med || r.Min != tc.min || r.Max != tc.max || r.Runs != len(tc.vals) {
			t.Errorf("summarize(%v) = %+v, want median %v, range %v..%v, runs %d", tc.vals, r, tc.med, tc.min, tc.max, len(tc.vals))
		}
	}
}

func TestPercentileNearestRank(t *testing.T) {
	v := make([]float64, 1000)
	for i := range v {
		v[i] = float64(i + 1)
	}
	if got := percentile(v, 0.99); got != 990 {
		t.Errorf("p99 of 1..1000 = %v, want 990", got)
	}
	if got := percentile(v, 0.5); got != 500 {
		t.Errorf("p50 of 1..1000 = %v, want 500", got)
	}
}

// TestSamplesKeepTargetOrder checks that rows come out in the targets'
// order whatever order the runs were recorded in, as the tables need.
func TestSamplesKeepTargetOrder(t *testing.T) {
	s := newSamples()
	s.add("pipe", "gbps_1conn", "Gbit/s", 2)
	s.add("copy", "gbps_1conn", "Gbit/s", 1)
	s.add("copy", "gbps_1conn", "Gbit/s", 3)
	rows := s.rows([]string{"copy", "pipe"})
	if len(rows) != 2 || rows[0].Engine != "copy" || rows[0].Value != 2 || rows[0].Runs != 2 || rows[1].Engine != "pipe" {
		t.Errorf("rows = %+v, want copy (median 2 of 2 runs) then pipe", rows)
	}
}

// TestSamplesNameTheirTool checks that a row added by another tool than
// the experiment's names it, and the others leave it to the experiment.
func TestSamplesNameTheirTool(t *testing.T) {
	s := newSamples()
	s.add("copy", "rr1_tps", "txn/s", 1)
	s.addBy("sockperf", "copy", "sockperf14_avg_us", "µs RTT", 30)
	rows := s.rows([]string{"copy"})
	if len(rows) != 2 || rows[0].Tool != "" || rows[1].Tool != "sockperf" {
		t.Errorf("rows = %+v, want rr1_tps without a tool, sockperf14_avg_us by sockperf", rows)
	}
}

func TestWriteJSONShape(t *testing.T) {
	one := &Result{Experiment: "segment", Rows: []Row{{Engine: "copy", Metric: "rr1_tps", Value: 2, Min: 1, Max: 3, Unit: "txn/s", Runs: 3}}}
	var buf bytes.Buffer
	if err := WriteJSON(&buf, []*Result{one}); err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := json.Unmarshal(buf.Bytes(), &obj); err != nil {
		t.Fatalf("one experiment is not a JSON object: %v", err)
	}
	row := obj["rows"].([]any)[0].(map[string]any)
	for _, k := range []string{"engine", "metric", "value", "min", "max", "unit", "runs"} {
		if _, ok := row[k]; !ok {
			t.Errorf("row lacks %q: %v", k, row)
		}
	}
	buf.Reset()
	if err := WriteJSON(&buf, []*Result{one, {Experiment: "web", Pending: "later"}}); err != nil {
		t.Fatal(err)
	}
	var arr []map[string]any
	if err := json.Unmarshal(buf.Bytes(), &arr); err != nil || len(arr) != 2 {
		t.Fatalf("two experiments are not a JSON array of two: %v", err)
	}
}

func TestWriteMarkdownCells(t *testing.T) {
	r := &Result{Experiment: "throughput",
		Rows: []Row{
			{Engine: "copy", Metric: "gbps_1conn", Value: 9.5, Min: 9.1, Max: 9.9, Unit: "Gbit/s", Runs: 5},
			{Engine: "route", Metric: "gbps_1conn", Value: 12, Min: 12, Max: 12, Unit: "Gbit/s", Runs: 1},
		},
		Unavailable: []Missing{{"ip", "not built yet"}},
	}
	var buf bytes.Buffer
	WriteMarkdown(&buf, r)
	out := buf.String()
	for _, want := range []string{"| copy | 9.50 (9.10–9.90) |", "| route | 12.00 |", "| ip | n/a |", "ip: n/a, not built yet"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

// TestWriteMarkdownFailedPartWay: a target that failed after some runs
// has one row, its cells, and its reason listed under the table.
func TestWriteMarkdownFailedPartWay(t *testing.T) {
	r := &Result{Experiment: "splice-cost",
		Rows:        []Row{{Engine: "copy", Metric: "splice_us_p50", Value: 5, Min: 4, Max: 6, Unit: "µs", Runs: 2}},
		Unavailable: []Missing{{"copy", "failed in run 3, its cells are the 2 before: dial"}},
	}
	var buf bytes.Buffer
	WriteMarkdown(&buf, r)
	out := buf.String()
	if n := strings.Count(out, "| copy |"); n != 1 {
		t.Errorf("%d rows for copy, want 1:\n%s", n, out)
	}
	if !strings.Contains(out, "- copy: n/a, failed in run 3, its cells are the 2 before: dial") {
		t.Errorf("the failure is not listed:\n%s", out)
	}
}
