// `splicer demo`, the README's first command: a row per engine and peer, each engine confirmed splicing in /flows, and numbers in every cell.

package main

import (
	"strconv"
	"strings"
	"testing"

	"github.com/splicer/splicer/bench"
	"github.com/splicer/splicer/internal/testenv"
)

func TestDemoShowsEveryEngine(t *testing.T) {
	testenv.RequireRoot(t)
	stdout, stderr, code := splicer(t, "demo", "--bulk", "300ms", "--rr", "300ms")
	if code != 0 {
		t.Fatalf("splicer demo: exit %d\nstderr:\n%s", code, stderr)
	}
	rows := demoRows(t, stdout)
	for _, name := range []string{"route", "copy", "pipe", "sockmap", "ip", "haproxy", "haproxy-splice", "socat"} {
		cells, ok := rows[name]
		if !ok {
			t.Errorf("no row for %s in:\n%s", name, stdout)
			continue
		}
		for i, what := range []string{"Gbit/s", "machine CPU s/GB", "1-byte txn/s"} {
			col := []int{0, 2, 3}[i]
			if v, err := strconv.ParseFloat(cells[col], 64); err != nil || v <= 0 {
				t.Errorf("%s: %s is %q, want a positive number", name, what, cells[col])
			}
		}
		note := cells[4]
		switch name {
		case "copy", "pipe", "sockmap", "ip":
			if want := "spliced by " + name + " (/flows)"; note != want {
				t.Errorf("%s: note %q, want %q", name, note, want)
			}
		default:
			if note != "" {
				t.Errorf("%s: note %q, want none for a peer", name, note)
			}
		}
	}
	if want := "the median of\n" + strconv.Itoa(bench.DemoRRRounds) + " runs interleaved"; !strings.Contains(stdout, want) {
		t.Errorf("the footer does not say how txn/s was measured (%q):\n%s", want, stdout)
	}
}

// demoRows parses the demo's Markdown table: the cells after the first,
// by the first.
func demoRows(tb testing.TB, out string) map[string][]string {
	tb.Helper()
	rows := map[string][]string{}
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| forwarder") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if len(cells) != 6 {
			tb.Fatalf("a demo row of %d cells, want 6: %q", len(cells), line)
		}
		rows[cells[0]] = cells[1:]
	}
	return rows
}
