// The crossover plot: each engine's CPU per transfer over transfer size, on log axes, with where ip becomes the cheaper marked.

package bench

import (
	"cmp"
	"fmt"
	"math"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// writeCrossoverPlots draws crossover's tcp and http curves, a file each;
// a mode with no rows draws nothing.
func writeCrossoverPlots(dir string, r *Result) ([]string, error) {
	var files []string
	for _, m := range crossoverModes {
		f, err := writeCrossoverPlot(dir, r, m)
		if err != nil {
			return files, err
		}
		if f != "" {
			files = append(files, f)
		}
	}
	return files, nil
}

// crossoverTitles say what one transfer is in each mode.
var crossoverTitles = map[string]string{
	"tcp":  "Forwarder CPU to move N bytes through a pair (a connection per transfer, tcp listener)",
	"http": "Forwarder CPU per N-byte response (keep-alive GET, http-reverse, min_body 0)",
}

func writeCrossoverPlot(dir string, r *Result, m crossoverMode) (string, error) {
	family := m.prefix + "proc_cpu_us"
	p := plot.New()
	p.Title.Text = crossoverTitles[m.name]
	p.X.Label.Text = "bytes per transfer, KiB (log scale)"
	p.Y.Label.Text = "process CPU µs per transfer (log scale)"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
	p.Legend.Top, p.Legend.Left = true, true
	lo, hi := math.Inf(1), 0.0
	drawn := 0
	for i, en := range crossoverEngines {
		var pts plotter.XYs
		for _, row := range r.Rows {
			if kb, ok := sizeOf(row.Metric, family); ok && row.Engine == en && row.Value > 0 {
				pts = append(pts, plotter.XY{X: kb, Y: row.Value})
				lo, hi = min(lo, row.Value), max(hi, row.Value)
			}
		}
		if len(pts) == 0 {
			continue
		}
		slices.SortFunc(pts, func(a, b plotter.XY) int { return cmp.Compare(a.X, b.X) })
		if err := addSeries(p, i, en, pts); err != nil {
			return "", err
		}
		drawn++
	}
	if drawn == 0 {
		return "", nil
	}
	for i, base := range crossoverBase {
		row, ok := r.Row("ip", m.prefix+"crossover_"+base+"_kib")
		if !ok || row.Value <= 0 {
			continue
		}
		mark, err := plotter.NewLine(plotter.XYs{{X: row.Value, Y: lo / 2}, {X: row.Value, Y: hi * 2}})
		if err != nil {
			return "", err
		}
		mark.Dashes = []vg.Length{vg.Points(4), vg.Points(4)}
		mark.Color = plotutil.Color(slices.Index(crossoverEngines, base))
		mark.Width = vg.Points(1 + float64(i))
		p.Add(mark)
		p.Legend.Add(fmt.Sprintf("ip = %s at %s KiB", base, num(row.Value)), mark)
	}
	p.Y.Min, p.Y.Max = lo/2, hi*2
	path := filepath.Join(dir, "crossover_"+m.name+".png")
	return path, p.Save(8*vg.Inch, 5*vg.Inch, path)
}
