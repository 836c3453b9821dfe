// Plots of the experiments: grouped bar charts of the headline metrics and the throughput-over-time trace across a splice.

package bench

import (
	"cmp"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// barPlot is one grouped bar chart: a group of bars per target, a bar per
// metric.
type barPlot struct {
	experiment, file, title, ylabel string
	metrics, labels                 []string
	// log draws points on a logarithmic axis instead of bars, for values
	// that span orders of magnitude (splice times: µs for copy, ms for ip).
	log bool
}

var barPlots = []barPlot{
	{"segment", "segment_tps.png", "Request/response over one connection", "transactions/s",
		[]string{"rr1_tps", "rr1460_tps"}, []string{"1 byte", "1460 bytes"}, false},
	{"segment", "segment_cpu.png", "CPU per transaction (all CPUs, softirq included)", "µs per transaction",
		[]string{"cpu_us_per_txn", "cpu_us_per_txn_1460"}, []string{"1 byte", "1460 bytes"}, false},
	{"throughput", "throughput_gbps.png", "Bulk throughput", "Gbit/s",
		[]string{"gbps_1conn", "gbps_2conn", "gbps_3conn", "gbps_8conn"}, []string{"1 conn", "2 conns", "3 conns", "8 conns"}, false},
	{"throughput", "throughput_cpu.png", "CPU per GB moved", "CPU seconds per GB",
		[]string{"cpu_s_per_gb", "proc_cpu_s_per_gb"}, []string{"all CPUs, softirq included", "forwarder processes"}, false},
	{"splice-cost", "splice_cost.png", "Time to splice an idle pair", "µs (log scale)",
		[]string{"splice_us_p50", "splice_us_p99"}, []string{"median", "p99"}, true},
	{"memory", "memory.png", "Memory per pair", "bytes per pair",
		[]string{"bytes_per_pair_unspliced", "bytes_per_pair_spliced"}, []string{"unspliced", "spliced"}, false},
	{"connrate", "connrate.png", "A connection per request (wrk -H 'Connection: close'), targets in sequence", "connections/s",
		[]string{"conn_s_1k-c16", "conn_s_1k-c256", "conn_s_64k-c16", "conn_s_64k-c256"},
		[]string{"1 KiB, 16 conns", "1 KiB, 256 conns", "64 KiB, 16 conns", "64 KiB, 256 conns"}, false},
	{"connrate", "connrate_alone.png", "A connection per request: rate in sequence over rate alone", "conn/s in sequence / conn/s alone",
		[]string{"seq_vs_alone_1k-c16", "seq_vs_alone_1k-c256", "seq_vs_alone_64k-c16", "seq_vs_alone_64k-c256", "seq_vs_alone_tcp1k-c16", "seq_vs_alone_tcp1k-c256"},
		[]string{"1 KiB, 16", "1 KiB, 256", "64 KiB, 16", "64 KiB, 256", "TCP 1 KiB, 16", "TCP 1 KiB, 256"}, false},
}

// WritePlots writes PNG plots of results into dir and returns the files.
func WritePlots(dir string, results []*Result) ([]string, error) {
	if err := mkdirAll(dir); err != nil {
		return nil, err
	}
	var files []string
	for _, r := range results {
		for _, bp := range barPlots {
			if bp.experiment != r.Experiment {
				continue
			}
			f, err := writeBars(dir, r, bp)
			if err != nil {
				return files, err
			}
			if f != "" {
				files = append(files, f)
			}
		}
		for _, lp := range sizePlots {
			if lp.experiment != r.Experiment {
				continue
			}
			f, err := writeSizeLines(dir, r, lp)
			if err != nil {
				return files, err
			}
			if f != "" {
				files = append(files, f)
			}
		}
		if r.Experiment == "crossover" {
			fs, err := writeCrossoverPlots(dir, r)
			files = append(files, fs...)
			if err != nil {
				return files, err
			}
		}
		if len(r.Traces) > 0 {
			f, err := writeTraces(dir, r)
			if err != nil {
				return files, err
			}
			files = append(files, f)
		}
	}
	return files, nil
}

// sizePlot is a line per target of one metric family over object size
// (metric names family_<size>, see sizeLabel).
type sizePlot struct {
	experiment, family, file, title, ylabel string
	// log spreads sizes (and values) spanning orders of magnitude on
	// logarithmic axes.
	log bool
	// targets, if set, are the targets drawn, in this order (the rest
	// would crowd the plot); unset: every target with the family.
	targets []string
}

// wrkPlotTargets are the README's rows of the wrk table: splicer's default
// engine beside the peers and no proxy at all.
var wrkPlotTargets = []string{"route", "auto", "auto-workers", "haproxy", "haproxy-buf256k", "nginx"}

var sizePlots = []sizePlot{
	{"web", "web_get_rps", "web_get_rps.png", "GET through the forward proxy, a connection per request", "requests/s", false, nil},
	{"web", "web_connect_rps", "web_connect_rps.png", "CONNECT tunnel and GET, a connection per request", "requests/s", false, nil},
	{"web", "wrk_rps", "web_wrk_rps.png", "HTTP reverse proxy, wrk -t2 -c16 keep-alive (median)", "requests/s", true, wrkPlotTargets},
	{"web", "wrk_p99_ms", "web_wrk_p99.png", "HTTP reverse proxy, wrk -t2 -c16 keep-alive: p99 latency (median)", "ms", true, wrkPlotTargets},
	{"switch", "switch_p50_ms", "switch_p50.png", "Switch latency over one keep-alive connection (median)", "ms", true, nil},
}

// plotTargets is the targets lp draws from r: those with a metric of its
// family, in r's order or, when lp names its targets, in that order.
func plotTargets(r *Result, lp sizePlot) []string {
	var have []string
	for _, row := range r.Rows {
		if _, ok := sizeOf(row.Metric, lp.family); ok && !slices.Contains(have, row.Engine) {
			have = append(have, row.Engine)
		}
	}
	if lp.targets == nil {
		return have
	}
	var out []string
	for _, t := range lp.targets {
		if slices.Contains(have, t) {
			out = append(out, t)
		}
	}
	return out
}

// writeSizeLines draws lp from r; it writes nothing when r has no such metric.
func writeSizeLines(dir string, r *Result, lp sizePlot) (string, error) {
	p := plot.New()
	p.Title.Text = lp.title
	p.X.Label.Text = "object size, KiB"
	p.Y.Label.Text = lp.ylabel
	p.Legend.Top = true
	if lp.log {
		p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
		p.X.Tick.Marker, p.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
		p.Legend.Left = true
	}
	targets := plotTargets(r, lp)
	if len(targets) == 0 {
		return "", nil
	}
	lo, top := math.Inf(1), 0.0
	falling := 0 // lines that end lower than they start, less rising ones
	for i, t := range targets {
		var pts plotter.XYs
		for _, row := range r.Rows {
			// A log axis has no place for zero.
			if kb, ok := sizeOf(row.Metric, lp.family); ok && row.Engine == t && row.Value > 0 {
				pts = append(pts, plotter.XY{X: kb, Y: row.Value})
				lo, top = min(lo, row.Value), max(top, row.Value)
			}
		}
		if len(pts) == 0 {
			continue
		}
		slices.SortFunc(pts, func(a, b plotter.XY) int { return cmp.Compare(a.X, b.X) })
		if pts[len(pts)-1].Y < pts[0].Y {
			falling++
		} else {
			falling--
		}
		if err := addSeries(p, i, t, pts); err != nil {
			return "", err
		}
	}
	if top == 0 {
		return "", nil
	}
	p.Y.Min, p.Y.Max = 0, top*1.3
	if lp.log {
		p.Y.Min, p.Y.Max = lo/2, top*2
		// On log axes the lines fill the upper left corner when they
		// fall with size (requests/s): the legend goes below them.
		p.Legend.Top = falling <= 0
	}
	path := filepath.Join(dir, lp.file)
	return path, p.Save(8*vg.Inch, 4*vg.Inch, path)
}

// sizeOf parses the object size, in KiB, of a metric of family.
func sizeOf(metric, family string) (float64, bool) {
	label, ok := strings.CutPrefix(metric, family+"_")
	if !ok || len(label) < 2 {
		return 0, false
	}
	n, err := strconv.ParseFloat(label[:len(label)-1], 64)
	if err != nil {
		return 0, false
	}
	switch label[len(label)-1] {
	case 'k':
		return n, true
	case 'm':
		return n * 1024, true
	}
	return 0, false
}

// writeBars draws bp from r; it writes nothing when r has none of the metrics.
func writeBars(dir string, r *Result, bp barPlot) (string, error) {
	var targets []string
	for _, row := range r.Rows {
		if slices.Contains(bp.metrics, row.Metric) && !slices.Contains(targets, row.Engine) {
			targets = append(targets, row.Engine)
		}
	}
	if len(targets) == 0 {
		return "", nil
	}
	if bp.log {
		return writePoints(dir, r, bp, targets)
	}
	p := plot.New()
	p.Title.Text = bp.title
	p.Y.Label.Text = bp.ylabel
	p.Legend.Top = true
	width := vg.Points(float64(48) / float64(len(bp.metrics)))
	top := 0.0
	for i, m := range bp.metrics {
		vals := make(plotter.Values, len(targets))
		for j, t := range targets {
			if row, ok := r.Row(t, m); ok {
				vals[j] = row.Value
				top = max(top, row.Value)
			}
		}
		bars, err := plotter.NewBarChart(vals, width)
		if err != nil {
			return "", err
		}
		bars.Color = plotutil.Color(i)
		bars.LineStyle.Width = 0
		bars.Offset = vg.Length(float64(i)-float64(len(bp.metrics)-1)/2) * width
		p.Add(bars)
		p.Legend.Add(bp.labels[i], bars)
	}
	p.NominalX(targets...)
	// Headroom above the tallest bar keeps the legend off the bars.
	p.Y.Min, p.Y.Max = 0, top*1.25
	path := filepath.Join(dir, bp.file)
	return path, p.Save(vg.Length(max(6, len(targets)))*vg.Inch, 4*vg.Inch, path)
}

// writePoints draws bp as points on a logarithmic axis, one column per
// target and a marker per metric.
func writePoints(dir string, r *Result, bp barPlot, targets []string) (string, error) {
	p := plot.New()
	p.Title.Text = bp.title
	p.Y.Label.Text = bp.ylabel
	p.Legend.Top = true
	p.Legend.Left = true
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	lo, hi := math.Inf(1), 0.0
	for i, m := range bp.metrics {
		var pts plotter.XYs
		for j, t := range targets {
			// A log axis has no place for zero or less.
			if row, ok := r.Row(t, m); ok && row.Value > 0 {
				pts = append(pts, plotter.XY{X: float64(j), Y: row.Value})
				lo, hi = min(lo, row.Value), max(hi, row.Value)
			}
		}
		if len(pts) == 0 {
			continue
		}
		sc, err := plotter.NewScatter(pts)
		if err != nil {
			return "", err
		}
		sc.GlyphStyle.Color = plotutil.Color(i)
		sc.GlyphStyle.Shape = plotutil.Shape(i)
		sc.GlyphStyle.Radius = vg.Points(5)
		p.Add(sc)
		p.Legend.Add(bp.labels[i], sc)
	}
	if hi == 0 {
		return "", nil
	}
	p.NominalX(targets...)
	p.Y.Min, p.Y.Max = lo/2, hi*4
	path := filepath.Join(dir, bp.file)
	return path, p.Save(vg.Length(max(6, len(targets)))*vg.Inch, 4*vg.Inch, path)
}

// writeTraces draws the throughput traces, one line per engine, with a
// vertical line where the pairs were spliced.
func writeTraces(dir string, r *Result) (string, error) {
	p := plot.New()
	p.Title.Text = "Throughput across a splice (one connection, spliced at the dashed line)"
	p.X.Label.Text = "seconds since the connection was up"
	p.Y.Label.Text = "Gbit/s (50 ms samples)"
	p.Legend.Top = true
	p.Legend.Left = true
	ymax, at := 0.0, 0.0
	for i, tr := range r.Traces {
		pts := make(plotter.XYs, len(tr.AtS))
		for j := range tr.AtS {
			pts[j] = plotter.XY{X: tr.AtS[j], Y: tr.Gbps[j]}
			ymax = max(ymax, tr.Gbps[j])
		}
		line, err := plotter.NewLine(pts)
		if err != nil {
			return "", err
		}
		line.Color = plotutil.Color(i)
		line.Width = vg.Points(1.5)
		p.Add(line)
		p.Legend.Add(tr.Engine, line)
		at = tr.SplicedAt
	}
	mark, err := plotter.NewLine(plotter.XYs{{X: at, Y: 0}, {X: at, Y: ymax * 1.05}})
	if err != nil {
		return "", err
	}
	mark.Dashes = []vg.Length{vg.Points(4), vg.Points(4)}
	p.Add(mark)
	p.Y.Min = 0
	path := filepath.Join(dir, "splice_trace.png")
	if err := p.Save(8*vg.Inch, 4*vg.Inch, path); err != nil {
		return "", fmt.Errorf("plot %s: %w", path, err)
	}
	return path, nil
}

func mkdirAll(dir string) error { return os.MkdirAll(dir, 0o755) }

// addSeries draws pts on p as the i-th series, a line with its points in
// the i-th colour and shape, named in the legend.
func addSeries(p *plot.Plot, i int, name string, pts plotter.XYs) error {
	line, points, err := plotter.NewLinePoints(pts)
	if err != nil {
		return err
	}
	line.Color, points.Color = plotutil.Color(i), plotutil.Color(i)
	points.Shape = plotutil.Shape(i)
	p.Add(line, points)
	p.Legend.Add(name, line, points)
	return nil
}
