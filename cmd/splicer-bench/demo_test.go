// `splicer demo`, the README's first command: a row per engine and peer, each engine confirmed splicing in /flows, the field's tools' figures first and the load generator's beside them, labelled.

package main

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/splicer/splicer/bench"
	"github.com/splicer/splicer/internal/testenv"
)

// demoColumns are the columns the demo must show, by how their header
// starts, in order: the tools' (the headline) before the load
// generator's.
var demoColumns = []string{"iperf3 Gbit/s", "sockperf RTT µs", "loadgen Gbit/s", "loadgen 1-byte txn/s", "machine CPU s/GB"}

func TestDemoShowsEveryEngine(t *testing.T) {
	testenv.RequireRoot(t)
	stdout, stderr, code := splicer(t, "demo", "--bulk", "300ms", "--rr", "300ms", "--tools", "300ms")
	if code != 0 {
		t.Fatalf("splicer demo: exit %d\nstderr:\n%s", code, stderr)
	}
	header, rows := demoTable(t, stdout)
	col := demoColumnIndex(t, header)
	for _, name := range []string{"route", "copy", "pipe", "sockmap", "ip", "haproxy", "haproxy-splice", "socat"} {
		cells, ok := rows[name]
		if !ok {
			t.Errorf("no row for %s in:\n%s", name, stdout)
			continue
		}
		for _, what := range demoColumns {
			if v, err := strconv.ParseFloat(cells[col[what]], 64); err != nil || v <= 0 {
				t.Errorf("%s: %s is %q, want a positive number", name, what, cells[col[what]])
			}
		}
		note := cells[col["note"]]
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
	for _, want := range []string{
		"\niperf3: `iperf3 -c HOST -P 1 ",
		"\nsockperf: `sockperf pp --tcp -m " + strconv.Itoa(bench.DemoSockperfSize) + " ",
		"\nloadgen: splicer's Go load generator, one connection; txn/s the median of " + strconv.Itoa(bench.DemoRRRounds) + " runs",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the lines under the table do not say how a tool measured (%q):\n%s", want, stdout)
		}
	}
}

// demoColumnIndex finds each of demoColumns and the note in the demo's
// header, the tools' columns before the load generator's.
func demoColumnIndex(tb testing.TB, header []string) map[string]int {
	tb.Helper()
	col := map[string]int{}
	for _, want := range append(slices.Clone(demoColumns), "note") {
		i := slices.IndexFunc(header, func(h string) bool { return strings.HasPrefix(h, want) })
		if i < 0 {
			tb.Fatalf("the demo's header has no column %q: %q", want, header)
		}
		col[want] = i
	}
	if col["iperf3 Gbit/s"] > col["loadgen Gbit/s"] || col["sockperf RTT µs"] > col["loadgen 1-byte txn/s"] {
		tb.Errorf("the load generator's columns come before the tools': %q", header)
	}
	return col
}

// demoTable parses the demo's Markdown table: the header's cells after
// the first, and each row's cells after the first, by the first.
func demoTable(tb testing.TB, out string) (header []string, rows map[string][]string) {
	tb.Helper()
	rows = map[string][]string{}
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasPrefix(line, "| ") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if cells[0] == "forwarder" {
			header = cells[1:]
			continue
		}
		if header == nil || len(cells) != len(header)+1 {
			tb.Fatalf("a demo row of %d cells under a header of %d: %q", len(cells), len(header)+1, line)
		}
		rows[cells[0]] = cells[1:]
	}
	if header == nil {
		tb.Fatalf("no table in the demo's output:\n%s", out)
	}
	return header, rows
}
