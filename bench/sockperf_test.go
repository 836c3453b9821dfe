// parseSockperf reads real sockperf 3.7 reports (captured on loopback, colour codes and all) and refuses those without round trips.

package bench

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// readTestdata returns the text of a file under testdata.
func readTestdata(tb testing.TB, name string) string {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

func TestParseSockperf(t *testing.T) {
	r, err := parseSockperf(readTestdata(t, "sockperf-pp-full-rtt.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if r.AvgUS != 19.028 || r.P99US != 88.681 || r.Observations != 81362 {
		t.Errorf("parsed %+v, want avg 19.028, p99 88.681, 81362 observations", r)
	}
}

func TestParseSockperfRefuses(t *testing.T) {
	for file, want := range map[string]string{
		// sockperf's default is half the round trip; rows are round trips.
		"sockperf-pp-half-rtt.txt": "half round trips",
		// sockperf exits 0 when it cannot connect: the report is the error.
		"sockperf-pp-refused.txt": "Connection refused",
	} {
		_, err := parseSockperf(readTestdata(t, file))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one saying %q", file, err, want)
		}
	}
	if _, err := parseSockperf("nothing useful"); err == nil {
		t.Error("a report without figures parsed")
	}
}

func TestSockperfArgs(t *testing.T) {
	for dur, secs := range map[time.Duration]string{250 * time.Millisecond: "1", time.Second: "2", 2 * time.Second: "3"} {
		args := sockperfArgs("10.99.1.1", "7104", 14, dur)
		want := []string{"pp", "--tcp", "-i", "10.99.1.1", "-p", "7104", "-m", "14", "-t", secs, "--full-rtt"}
		if !slices.Equal(args, want) {
			t.Errorf("sockperfArgs(%v) = %v, want %v", dur, args, want)
		}
	}
}
