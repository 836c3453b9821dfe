// parseIperf3 reads real iperf3 3.12 JSON reports (captured on loopback) and refuses one that reports an error or no bytes.

package bench

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseIperf3(t *testing.T) {
	gbps, err := parseIperf3([]byte(readTestdata(t, "iperf3-2streams.json")))
	if err != nil {
		t.Fatal(err)
	}
	// end.sum_received.bits_per_second: both streams, as the server got them.
	if want := 21240722846.53552 / 1e9; math.Abs(gbps-want) > 1e-9 {
		t.Errorf("parsed %v Gbit/s, want %v", gbps, want)
	}
}

func TestParseIperf3Refuses(t *testing.T) {
	for name, tc := range map[string]struct{ report, want string }{
		// iperf3 -J exits 0 when it cannot connect: the report is the error.
		"refused":   {readTestdata(t, "iperf3-refused.json"), "Connection refused"},
		"not json":  {"iperf3: error - unable to connect", "not an iperf3 JSON report"},
		"no result": {`{"start": {}, "intervals": [], "end": {}}`, "no bytes received"},
	} {
		_, err := parseIperf3([]byte(tc.report))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one saying %q", name, err, tc.want)
		}
	}
}

func TestIperf3Args(t *testing.T) {
	for dur, secs := range map[time.Duration]string{250 * time.Millisecond: "1", time.Second: "1", 2 * time.Second: "2", 2500 * time.Millisecond: "3"} {
		args := iperf3Args("10.99.1.1", "7105", 8, dur)
		want := []string{"-c", "10.99.1.1", "-p", "7105", "-P", "8", "-t", secs, "-J"}
		if !slices.Equal(args, want) {
			t.Errorf("iperf3Args(%v) = %v, want %v", dur, args, want)
		}
	}
}
