// Experiment results: rows of median, min and max over repetitions, as JSON and as Markdown tables.

package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// Row is one metric of one target: the median of its runs and their range.
type Row struct {
	Engine string  `json:"engine"`
	Metric string  `json:"metric"`
	Value  float64 `json:"value"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	Unit   string  `json:"unit"`
	Runs   int     `json:"runs"`
	// Pairs is the number of pairs a memory row was measured with.
	Pairs int `json:"pairs,omitempty"`
	// Tool is what measured the row: "loadgen" (splicer's own Go load
	// generator), "wrk", "sockperf", "iperf3", or "splicer-bench" (timings taken
	// inside the experiment, e.g. splice cost and memory).
	Tool string `json:"tool"`
}

// Missing is a target an experiment could not measure, and why.
type Missing struct {
	Engine string `json:"engine"`
	Reason string `json:"reason"`
}

// Result is one experiment's output.
type Result struct {
	Experiment string `json:"experiment"`
	// Pending, for an experiment not implemented yet, says what it waits for.
	Pending string `json:"pending,omitempty"`
	// Rows hold every measured target's metrics, in table order.
	Rows []Row `json:"rows"`
	// Unavailable lists the targets with no rows and why.
	Unavailable []Missing `json:"unavailable,omitempty"`
	// Notes say what a reader needs to read the numbers: the method, the
	// settings, and anything that went differently than planned.
	Notes []string `json:"notes,omitempty"`
	// Traces are throughput-over-time series per target, for plots.
	Traces []Trace `json:"traces,omitempty"`
}

// tableColumns are the metrics each experiment's Markdown table shows, in
// order; the JSON has every metric.
var tableColumns = map[string][]string{
	"segment": {"rr1_tps", "rr1460_tps", "rr1_speedup", "rr1460_speedup",
		"cpu_us_per_txn", "cpu_us_per_txn_1460", "proc_cpu_us_per_txn", "proc_cpu_us_per_txn_1460",
		"sockperf14_avg_us", "sockperf14_p99_us", "sockperf1460_avg_us", "sockperf1460_p99_us"},
	"throughput":  {"gbps_1conn", "gbps_2conn", "gbps_3conn", "gbps_8conn", "cpu_s_per_gb", "proc_cpu_s_per_gb", "iperf3_gbps_1conn", "iperf3_gbps_8conn"},
	"splice-cost": {"splice_us_p50", "splice_us_p99", "unsplice_us_p50", "unsplice_us_p99", "gbps_before_splice", "gbps_after_splice"},
	"iprate":      {"pairs_per_s", "spliced_per_s", "fallbacks", "local_ports_exhausted", "local_ports_reused", "errors", "fds_max", "cpu_us_per_pair", "client_cpu_us_per_pair", "origin_cpu_us_per_pair"},
	"idle":        {"pairs_spliced", "pairs_echoing", "fds", "rss_bytes_per_pair", "bpf_bytes_per_pair", "rss_mb"},
	"memory": {"bytes_per_pair_unspliced", "bytes_per_pair_spliced", "bytes_per_pair_unspliced_max", "bytes_per_pair_spliced_max",
		"rss_bytes_per_pair_unspliced", "rss_bytes_per_pair_spliced", "kernel_bytes_per_pair_unspliced", "kernel_bytes_per_pair_spliced", "bpf_bytes_per_pair_spliced"},
}

// Trace is one target's throughput over time, with the moment its pairs
// were spliced.
type Trace struct {
	Engine    string  `json:"engine"`
	SplicedAt float64 `json:"spliced_at_s"`
	// SplicedBy is the engine /flows showed for the pair after the splice.
	SplicedBy string    `json:"spliced_by,omitempty"`
	AtS       []float64 `json:"at_s"`
	Gbps      []float64 `json:"gbps"`
}

// samples collects the runs of each (target, metric) in first-seen order.
type samples struct {
	order []string
	vals  map[string][]float64
	units map[string]string
	// tools name what measured a metric when it is not the experiment's
	// tool (see addBy).
	tools map[string]string
}

func newSamples() *samples {
	return &samples{vals: map[string][]float64{}, units: map[string]string{}, tools: map[string]string{}}
}

func (s *samples) add(target, metric, unit string, v float64) {
	k := target + "\x00" + metric
	if _, ok := s.vals[k]; !ok {
		s.order = append(s.order, k)
	}
	s.vals[k] = append(s.vals[k], v)
	s.units[k] = unit
}

// addBy adds a run measured by tool rather than the experiment's own.
func (s *samples) addBy(tool, target, metric, unit string, v float64) {
	s.add(target, metric, unit, v)
	s.tools[target+"\x00"+metric] = tool
}

// get returns the runs of a metric of a target.
func (s *samples) get(target, metric string) []float64 { return s.vals[target+"\x00"+metric] }

// rows summarises every (target, metric) in targets' order, then metric order.
func (s *samples) rows(targets []string) []Row {
	var out []Row
	for _, t := range targets {
		for _, k := range s.order {
			name, metric, _ := strings.Cut(k, "\x00")
			if name != t {
				continue
			}
			row := summarize(name, metric, s.units[k], s.vals[k])
			row.Tool = s.tools[k]
			out = append(out, row)
		}
	}
	return out
}

// summarize is the median and range of one metric's runs.
func summarize(target, metric, unit string, vals []float64) Row {
	v := slices.Clone(vals)
	slices.Sort(v)
	return Row{Engine: target, Metric: metric, Unit: unit, Runs: len(v),
		Value: median(v), Min: v[0], Max: v[len(v)-1]}
}

// median of sorted values; the mean of the middle two for an even count.
func median(sorted []float64) float64 {
	n := len(sorted)
	if n == 0 {
		return math.NaN()
	}
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

// percentile of sorted values, nearest rank.
func percentile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// Row returns the row of target and metric, or false.
func (r *Result) Row(target, metric string) (Row, bool) {
	for _, row := range r.Rows {
		if row.Engine == target && row.Metric == metric {
			return row, true
		}
	}
	return Row{}, false
}

// WriteJSON writes one result as a JSON object, or several (from `all`)
// as a JSON array of such objects.
func WriteJSON(w io.Writer, results []*Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if len(results) == 1 {
		return enc.Encode(results[0])
	}
	return enc.Encode(results)
}

// WriteMarkdown prints a result as a Markdown table: a line per target, a
// column per metric, each cell the median with the min–max range.
func WriteMarkdown(w io.Writer, r *Result) {
	fmt.Fprintf(w, "### %s\n\n", r.Experiment)
	if r.Pending != "" {
		fmt.Fprintf(w, "%s\n\n", r.Pending)
		return
	}
	if fams := pointFamilies[r.Experiment]; len(fams) > 0 {
		writePointTables(w, r, fams)
		return
	}
	if fams := sizedFamilies[r.Experiment]; len(fams) > 0 {
		writeSizedTables(w, r, fams)
		return
	}
	cols := tableColumns[r.Experiment]
	if len(cols) == 0 {
		for _, row := range r.Rows {
			if !slices.Contains(cols, row.Metric) {
				cols = append(cols, row.Metric)
			}
		}
	}
	// A column no target has (a count --quick skips) is left out.
	cols = slices.DeleteFunc(slices.Clone(cols), func(c string) bool { return unitOf(r, c) == "" })
	var targets []string
	for _, row := range r.Rows {
		if !slices.Contains(targets, row.Engine) {
			targets = append(targets, row.Engine)
		}
	}
	if len(cols) > 0 {
		head, rule := "| target |", "|---|"
		for _, c := range cols {
			head += " " + c + " (" + unitOf(r, c) + ") |"
			rule += "---:|"
		}
		fmt.Fprintln(w, head)
		fmt.Fprintln(w, rule)
		for _, t := range targets {
			line := "| " + t + " |"
			for _, c := range cols {
				row, ok := r.Row(t, c)
				if !ok {
					line += " n/a |"
					continue
				}
				line += " " + cell(row) + " |"
			}
			fmt.Fprintln(w, line)
		}
		for _, m := range r.Unavailable {
			if slices.Contains(targets, m.Engine) {
				continue // measured before it failed: its row is above, its reason below
			}
			fmt.Fprintf(w, "| %s |%s\n", m.Engine, strings.Repeat(" n/a |", len(cols)))
		}
	}
	fmt.Fprintln(w)
	writeListed(w, r)
}

// writeListed prints the unavailable targets and the notes.
func writeListed(w io.Writer, r *Result) {
	for _, m := range r.Unavailable {
		fmt.Fprintf(w, "- %s: n/a, %s\n", m.Engine, m.Reason)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "- %s\n", n)
	}
	fmt.Fprintln(w)
}

// sizedFamilies are the metric families of the experiments measured per
// object size (metric names family_<size>), each shown as its own table
// with a column per size.
var sizedFamilies = map[string][]string{
	"web": {"web_get_rps", "web_get_cpu_us", "web_get_proc_cpu_us", "web_get_p50_ms",
		"web_connect_rps", "web_connect_cpu_us", "web_connect_proc_cpu_us", "web_connect_p50_ms"},
	"switch":    {"switch_p50_ms", "switch_p99_ms", "switch_gbps"},
	"crossover": {"proc_cpu_us", "wall_ms", "http_proc_cpu_us", "http_wall_ms"},
}

// writeSizedTables prints a table per family: a line per target, a column
// per object size.
func writeSizedTables(w io.Writer, r *Result, fams []string) {
	var targets []string
	for _, row := range r.Rows {
		if !slices.Contains(targets, row.Engine) {
			targets = append(targets, row.Engine)
		}
	}
	for _, fam := range fams {
		var sizes []string
		unit := ""
		for _, row := range r.Rows {
			if size, ok := strings.CutPrefix(row.Metric, fam+"_"); ok && !strings.Contains(size, "_") && !slices.Contains(sizes, size) {
				sizes = append(sizes, size)
				unit = row.Unit
			}
		}
		if len(sizes) == 0 {
			continue
		}
		fmt.Fprintf(w, "%s (%s), by object size:\n\n| target |", fam, unit)
		for _, size := range sizes {
			fmt.Fprintf(w, " %s |", size)
		}
		fmt.Fprintf(w, "\n|---|%s\n", strings.Repeat("---:|", len(sizes)))
		for _, t := range targets {
			line := "| " + t + " |"
			for _, size := range sizes {
				if row, ok := r.Row(t, fam+"_"+size); ok {
					line += " " + cell(row) + " |"
				} else {
					line += " n/a |"
				}
			}
			fmt.Fprintln(w, line)
		}
		fmt.Fprintln(w)
	}
	writeUnsized(w, r, fams, targets)
	writeListed(w, r)
}

// writeUnsized prints, as one table of a column per metric, the rows of
// an experiment measured per size that belong to no size family (such as
// crossover's crossover_copy_kib).
func writeUnsized(w io.Writer, r *Result, fams []string, targets []string) {
	var cols []string
	for _, row := range r.Rows {
		sized := slices.ContainsFunc(fams, func(f string) bool {
			size, ok := strings.CutPrefix(row.Metric, f+"_")
			return ok && !strings.Contains(size, "_")
		})
		if !sized && !slices.Contains(cols, row.Metric) {
			cols = append(cols, row.Metric)
		}
	}
	if len(cols) == 0 {
		return
	}
	fmt.Fprint(w, "| target |")
	for _, c := range cols {
		fmt.Fprintf(w, " %s (%s) |", c, unitOf(r, c))
	}
	fmt.Fprintf(w, "\n|---|%s\n", strings.Repeat("---:|", len(cols)))
	for _, t := range targets {
		line, any := "| "+t+" |", false
		for _, c := range cols {
			if row, ok := r.Row(t, c); ok {
				line += " " + cell(row) + " |"
				any = true
			} else {
				line += " n/a |"
			}
		}
		if any {
			fmt.Fprintln(w, line)
		}
	}
	fmt.Fprintln(w)
}

func unitOf(r *Result, metric string) string {
	for _, row := range r.Rows {
		if row.Metric == metric {
			return row.Unit
		}
	}
	return ""
}

// cell formats a median with its range; a single run has no range.
func cell(r Row) string {
	if r.Runs < 2 || r.Min == r.Max {
		return num(r.Value)
	}
	return fmt.Sprintf("%s (%s–%s)", num(r.Value), num(r.Min), num(r.Max))
}

// num prints with about three significant digits.
func num(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1000:
		return fmt.Sprintf("%.0f", v)
	case a >= 100:
		return fmt.Sprintf("%.1f", v)
	case a >= 0.1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}

// headline is the summary table's columns: experiment, metric, heading.
var headline = []struct{ experiment, metric, heading string }{
	{"segment", "rr1_tps", "1-byte txn/s"},
	{"segment", "rr1_speedup", "vs copy"},
	{"segment", "cpu_us_per_txn", "CPU µs/txn"},
	{"throughput", "gbps_1conn", "Gbit/s, 1 conn"},
	{"throughput", "gbps_8conn", "Gbit/s, 8 conns"},
	{"throughput", "cpu_s_per_gb", "CPU s/GB"},
	{"splice-cost", "splice_us_p50", "splice µs (p50)"},
	{"memory", "bytes_per_pair_spliced", "bytes/pair spliced"},
	{"web", "web_get_rps_64k", "64 KiB GET/s"},
	{"switch", "switch_p50_ms_1k", "switch 1 KiB p50 ms"},
	{"switch", "switch_gbps_1m", "switch 1 MiB Gbit/s"},
}

// WriteHeadline prints one table of the medians that matter most across
// experiments, a line per target; it prints nothing for a single experiment.
func WriteHeadline(w io.Writer, results []*Result) {
	byName := map[string]*Result{}
	var targets []string
	for _, r := range results {
		byName[r.Experiment] = r
		for _, row := range r.Rows {
			if !slices.Contains(targets, row.Engine) {
				targets = append(targets, row.Engine)
			}
		}
	}
	if len(byName) < 2 || len(targets) == 0 {
		return
	}
	head, rule := "| target |", "|---|"
	for _, h := range headline {
		head += " " + h.heading + " |"
		rule += "---:|"
	}
	fmt.Fprintf(w, "### headline (medians)\n\n%s\n%s\n", head, rule)
	for _, t := range targets {
		line := "| " + t + " |"
		for _, h := range headline {
			cellText := "n/a"
			if r := byName[h.experiment]; r != nil {
				if row, ok := r.Row(t, h.metric); ok {
					cellText = num(row.Value)
				}
			}
			line += " " + cellText + " |"
		}
		fmt.Fprintln(w, line)
	}
	fmt.Fprintln(w)
}
