// Tests of the plots: which targets a size plot draws, and the wrk plots written from web's rows.

package bench

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// webWithWrkRows is a web result with wrk rows for targets at 1 KiB and 1 MiB,
// and one row of another family.
func webWithWrkRows(targets ...string) *Result {
	r := &Result{Experiment: "web"}
	for i, t := range targets {
		for _, size := range []string{"1k", "1m"} {
			v := float64(1000 * (i + 1))
			r.Rows = append(r.Rows,
				Row{Engine: t, Metric: "wrk_rps_" + size, Value: v, Tool: "wrk"},
				Row{Engine: t, Metric: "wrk_p99_ms_" + size, Value: v / 1e4, Tool: "wrk"})
		}
	}
	r.Rows = append(r.Rows, Row{Engine: "copy", Metric: "web_get_rps_1k", Value: 5})
	return r
}

func sizePlotOf(tb testing.TB, file string) sizePlot {
	tb.Helper()
	return find(tb, sizePlots, func(lp sizePlot) bool { return lp.file == file }, "size plot writes "+file)
}

// TestWrkPlotDrawsTheReadmeRows: the wrk plot draws the README table's
// targets in its order, leaves out the other engines and the peers'
// variants, and skips a target the run lacks.
func TestWrkPlotDrawsTheReadmeRows(t *testing.T) {
	r := webWithWrkRows("copy", "pipe", "nginx", "auto", "haproxy-splice", "haproxy", "route")
	got := plotTargets(r, sizePlotOf(t, "web_wrk_rps.png"))
	want := []string{"route", "auto", "haproxy", "nginx"}
	if !slices.Equal(got, want) {
		t.Errorf("wrk plot draws %v, want %v", got, want)
	}
	if got := plotTargets(r, sizePlotOf(t, "web_get_rps.png")); !slices.Equal(got, []string{"copy"}) {
		t.Errorf("a plot without a target list draws %v, want every target with the family (copy)", got)
	}
}

// TestWritePlotsWritesTheWrkPlots: a web result with wrk rows gets its
// rate and p99 plots as PNG files.
func TestWritePlotsWritesTheWrkPlots(t *testing.T) {
	dir := t.TempDir()
	files, err := WritePlots(dir, []*Result{webWithWrkRows("route", "auto", "haproxy")})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"web_wrk_rps.png", "web_wrk_p99.png"} {
		path := filepath.Join(dir, name)
		if !slices.Contains(files, path) {
			t.Errorf("WritePlots returned %v, without %s", files, name)
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b, []byte("\x89PNG")) {
			t.Errorf("%s is not a PNG", name)
		}
	}
}
