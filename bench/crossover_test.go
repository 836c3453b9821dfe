// Tests of the crossover experiment's arithmetic and output: where ip's cost meets copy's, its table and its plot.

package bench

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCrossoverAt: the crossover is interpolated between the last size
// where ip costs more and the next; noise at small sizes, where ip dips
// below, does not move it; ip cheaper everywhere puts it at the smallest
// size; ip dearer at the largest leaves none.
func TestCrossoverAt(t *testing.T) {
	sizes := kib(1, 64, 1024)
	for _, tc := range []struct {
		name     string
		base, ip []float64
		want     float64 // bytes; 0: none
	}{
		{"crosses between 64 KiB and 1 MiB", []float64{100, 200, 1000}, []float64{150, 300, 500}, 64<<10 + (1024-64)<<10*100/600},
		{"noise below the crossing", []float64{100, 200, 1000}, []float64{90, 300, 500}, 64<<10 + (1024-64)<<10*100/600},
		{"ip cheaper at every size", []float64{100, 200, 1000}, []float64{90, 150, 500}, 1 << 10},
		{"ip dearer at the largest", []float64{100, 200, 400}, []float64{150, 300, 500}, 0},
		{"equal is not dearer", []float64{100, 200, 1000}, []float64{150, 200, 500}, 1<<10 + (64-1)<<10*50/50},
	} {
		base, ip := map[int64]float64{}, map[int64]float64{}
		for i, s := range sizes {
			base[s], ip[s] = tc.base[i], tc.ip[i]
		}
		got, ok := crossoverAt(sizes, base, ip)
		if tc.want == 0 {
			if ok {
				t.Errorf("%s: crossover at %v bytes, want none", tc.name, got)
			}
			continue
		}
		if !ok || math.Abs(got-tc.want) > 1 {
			t.Errorf("%s: crossover at %v bytes (found %v), want %v", tc.name, got, ok, tc.want)
		}
	}
}

// crossoverResult is a crossover result of three engines at 1 KiB and
// 1 MiB, ip crossing copy at 300 KiB.
func crossoverResult() *Result {
	r := &Result{Experiment: "crossover"}
	for i, en := range crossoverEngines {
		for j, size := range []string{"1k", "1m"} {
			v := float64(100 + 50*i + 1000*j*(2-i))
			r.Rows = append(r.Rows,
				Row{Engine: en, Metric: "proc_cpu_us_" + size, Value: v, Min: v, Max: v, Unit: "µs", Runs: 1},
				Row{Engine: en, Metric: "wall_ms_" + size, Value: v / 100, Min: v / 100, Max: v / 100, Unit: "ms", Runs: 1})
		}
	}
	r.Rows = append(r.Rows, Row{Engine: "ip", Metric: "crossover_copy_kib", Value: 300, Min: 250, Max: 350, Unit: "KiB", Runs: 3})
	return r
}

// TestCrossoverTable: the Markdown has a table per family and the
// crossover, which belongs to no size, in a table of its own.
func TestCrossoverTable(t *testing.T) {
	var buf bytes.Buffer
	WriteMarkdown(&buf, crossoverResult())
	out := buf.String()
	for _, want := range []string{"proc_cpu_us (µs), by object size:", "| ip | 200.0 | 200.0 |", "| crossover_copy_kib (KiB) |", "| ip | 300.0 (250.0–350.0) |"} {
		if !strings.Contains(out, want) {
			t.Errorf("markdown lacks %q:\n%s", want, out)
		}
	}
}

// TestCrossoverPlot: WritePlots draws crossover's tcp curves into
// crossover_tcp.png, and nothing for the http mode it has no rows of.
func TestCrossoverPlot(t *testing.T) {
	dir := t.TempDir()
	files, err := WritePlots(dir, []*Result{crossoverResult()})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "crossover_tcp.png")
	if len(files) != 1 || files[0] != path {
		t.Fatalf("WritePlots wrote %v, want only %s", files, path)
	}
	if st, err := os.Stat(path); err != nil || st.Size() == 0 {
		t.Errorf("%s missing or empty: %v", path, err)
	}
}
