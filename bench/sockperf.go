// sockperf, the field's latency tool, through a target: its server in the server namespace, its ping-pong client in the client namespace, and its report parsed.

package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// sockperfSizes are the message sizes sockperf ping-pongs: its smallest
// (14 bytes, its own header alone) and one full segment.
var sockperfSizes = []int{14, 1460}

// sockperfOverhead is the part of sockperf's -t it leaves out of the
// measurement: a 400 ms warm-up and about 50 ms at the end (its report's
// "[Valid Duration]").
const sockperfOverhead = 450 * time.Millisecond

// SockperfRun is one sockperf ping-pong through a target, in round-trip
// microseconds as sockperf reports them with --full-rtt.
type SockperfRun struct {
	AvgUS, P99US float64
	// Observations is the number of round trips measured.
	Observations int
}

// startSockperf starts sockperf's server in the server namespace, at most
// once per Env; its error says why sockperf cannot run here.
func (e *Env) startSockperf(ctx context.Context) error {
	e.sockperfOnce.Do(func() { e.sockperfErr = e.runSockperfServer(ctx) })
	return e.sockperfErr
}

// runSockperfServer runs `sockperf sr` where the origin listens, on the
// port every target's Sockperf listener forwards to.
func (e *Env) runSockperfServer(ctx context.Context) error {
	if m := missing("sockperf"); m != "" {
		return errors.New(m)
	}
	port := strconv.Itoa(originPort + int(Sockperf))
	if _, err := e.start(ctx, e.server, "sockperf-server", "sockperf", "sr", "--tcp", "-i", e.addrs.server, "-p", port); err != nil {
		return err
	}
	if err := e.waitListening(net.JoinHostPort(e.addrs.server, port)); err != nil {
		return fmt.Errorf("sockperf server did not start: %v: %s", err, strings.Join(strings.Fields(e.LogTail("sockperf-server")), " "))
	}
	return nil
}

// Sockperf ping-pongs size-byte messages through t with the sockperf
// server over one TCP connection for at least dur after sockperf's own
// warm-up, and reads the round trips from its report. sockperf exits 0
// even when it cannot connect, so a report without figures is the error.
func (e *Env) Sockperf(ctx context.Context, t *Target, size int, dur time.Duration) (SockperfRun, error) {
	host, port, err := net.SplitHostPort(t.Addr(Sockperf))
	if err != nil {
		return SockperfRun{}, err
	}
	out, err := e.Client.Command(ctx, "sockperf", sockperfArgs(host, port, size, dur)...).CombinedOutput()
	if err != nil {
		return SockperfRun{}, fmt.Errorf("%s sockperf%d: %v: %s", t.Name, size, err, strings.TrimSpace(stripANSI(string(out))))
	}
	r, err := parseSockperf(string(out))
	if err != nil {
		return SockperfRun{}, fmt.Errorf("%s sockperf%d: %w", t.Name, size, err)
	}
	return r, nil
}

// sockperfArgs are the client's arguments: TCP ping-pong in round trips
// for sockperfSeconds(dur). sockperf sets TCP_NODELAY unless told
// otherwise.
func sockperfArgs(host, port string, size int, dur time.Duration) []string {
	return []string{"pp", "--tcp", "-i", host, "-p", port, "-m", strconv.Itoa(size), "-t", strconv.Itoa(sockperfSeconds(dur)), "--full-rtt"}
}

// sockperfSeconds is sockperf's -t for a measured window of at least dur:
// whole seconds, its overhead included.
func sockperfSeconds(dur time.Duration) int {
	return max(1, int(math.Ceil((dur + sockperfOverhead).Seconds())))
}

// ansiEscape matches the colour codes sockperf writes even into a pipe.
var ansiEscape = regexp.MustCompile("\x1b\\[[0-9;]*m")

func stripANSI(s string) string { return ansiEscape.ReplaceAllString(s, "") }

// parseSockperf reads the average, the 99th percentile and the number of
// observations from a `sockperf pp --full-rtt` report. A report in
// sockperf's default half round trips (avg-latency) is refused, so that a
// row never mixes the two.
func parseSockperf(out string) (SockperfRun, error) {
	var r SockperfRun
	var avg, p99 bool
	var errs []string
	sc := bufio.NewScanner(strings.NewReader(stripANSI(out)))
	for sc.Scan() {
		line := strings.TrimSpace(strings.TrimPrefix(sc.Text(), "sockperf:"))
		switch {
		case strings.HasPrefix(line, "====> avg-latency="):
			return r, errors.New("the report is in half round trips (avg-latency): run sockperf pp with --full-rtt")
		case strings.HasPrefix(line, "====> avg-rtt="):
			avg = scanned(line, "====> avg-rtt=%f", &r.AvgUS)
		case strings.HasPrefix(line, "---> percentile 99.000 "):
			p99 = scanned(line, "---> percentile 99.000 = %f", &r.P99US)
		case strings.HasPrefix(line, "Total ") && strings.Contains(line, " observations"):
			scanned(line, "Total %d observations", &r.Observations)
		case strings.Contains(line, "ERROR"):
			errs = append(errs, line)
		}
	}
	switch {
	case len(errs) > 0 && !(avg && p99):
		return r, errors.New(strings.Join(errs, "; "))
	case !avg || !p99:
		return r, fmt.Errorf("no avg-rtt or 99th percentile in the report:\n%s", strings.TrimSpace(stripANSI(out)))
	case r.Observations == 0:
		return r, errors.New("the report counts no observations")
	}
	return r, nil
}

// scanned reports whether line matched format and filled v.
func scanned(line, format string, v any) bool {
	n, err := fmt.Sscanf(line, format, v)
	return err == nil && n == 1
}
