// Tests of the web and switch helpers: size labels, splicer's splice counters, the CONNECT handshake and the per-size tables.

package bench

import (
	"bufio"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
)

func TestSizeLabelRoundTrip(t *testing.T) {
	for _, size := range append(DefaultSettings().WebSizes, DefaultSettings().SwitchSizes...) {
		l := sizeLabel(size)
		kb, ok := sizeOf("web_get_rps_"+l, "web_get_rps")
		if !ok || int64(kb*1024) != size {
			t.Errorf("sizeLabel(%d) = %q, read back as %v KiB (ok %v)", size, l, kb, ok)
		}
	}
	if got := sizeLabel(1 << 20); got != "1m" {
		t.Errorf("sizeLabel(1 MiB) = %q, want 1m", got)
	}
	if _, ok := sizeOf("web_get_proc_cpu_us_1k", "web_get_rps"); ok {
		t.Errorf("sizeOf read a metric of another family")
	}
}

func TestSpliceCountsFromMetrics(t *testing.T) {
	before := parseMetrics(t, `# HELP splicer_splice_transitions_total Splices
splicer_splice_transitions_total{engine="copy",outcome="limit"} 3
splicer_splice_transitions_total{engine="ip",outcome="fallback"} 7
splicer_splice_transitions_total{engine="sockmap",outcome="eof"} 1
splicer_bytes_total{listener="x",direction="up"} 9`)
	if before["copy"] != 3 || before["sockmap"] != 1 || before["ip"] != 0 {
		t.Fatalf("counts %v; want copy 3, sockmap 1 and the fallback not counted", before)
	}
	after := map[string]float64{"copy": 4, "sockmap": 11, "ip": 0}
	if got := movedEngines(before, after); !slices.Equal(got, []string{"sockmap", "copy"}) {
		t.Errorf("moved engines %v, want [sockmap copy] (most splices first)", got)
	}
}

func parseMetrics(tb testing.TB, text string) map[string]float64 {
	tb.Helper()
	counts := map[string]float64{}
	for _, line := range strings.Split(text, "\n") {
		if en, v, ok := parseSpliceLine(line); ok {
			counts[en] += v
		}
	}
	return counts
}

func TestConnectTunnel(t *testing.T) {
	for _, tc := range []struct {
		answer, wantErr string
	}{
		{"HTTP/1.1 200 Connection established\r\n\r\n", ""},
		{"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n", "403"},
		{"HTTP/1.1 200 OK\r\n\r\nextra", "unexpected bytes"},
	} {
		client, proxy := net.Pipe()
		got := make(chan string, 1)
		go func() {
			req, err := http.ReadRequest(bufio.NewReader(proxy))
			if err == nil {
				got <- req.Method + " " + req.Host
				proxy.Write([]byte(tc.answer))
			}
			proxy.Close()
		}()
		err := connectTunnel(client, "10.99.2.2:5004")
		client.Close()
		if line := <-got; line != "CONNECT 10.99.2.2:5004" {
			t.Errorf("proxy got %q, want CONNECT 10.99.2.2:5004", line)
		}
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("answer %q: %v", tc.answer, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("answer %q: error %v, want one mentioning %q", tc.answer, err, tc.wantErr)
		}
	}
}

func TestSizedTables(t *testing.T) {
	r := &Result{Experiment: "switch", Rows: []Row{
		{Engine: "copy", Metric: "switch_p50_ms_1k", Value: 0.2, Min: 0.2, Max: 0.2, Unit: "ms", Runs: 1},
		{Engine: "copy", Metric: "switch_p50_ms_1m", Value: 2, Min: 2, Max: 2, Unit: "ms", Runs: 1},
		{Engine: "haproxy", Metric: "switch_p50_ms_1k", Value: 0.3, Min: 0.3, Max: 0.3, Unit: "ms", Runs: 1},
	}, Unavailable: []Missing{{"socat", "not an HTTP switch"}}}
	var b strings.Builder
	WriteMarkdown(&b, r)
	out := b.String()
	for _, want := range []string{"switch_p50_ms (ms), by object size", "| target | 1k | 1m |", "| copy | 0.20 | 2.00 |", "| haproxy | 0.30 | n/a |", "- socat: n/a, not an HTTP switch"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "switch_gbps") {
		t.Errorf("table shows a family with no rows:\n%s", out)
	}
}
