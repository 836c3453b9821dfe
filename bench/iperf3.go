// iperf3, the field's bulk-throughput tool, through a target: its server in the server namespace, its client in the client namespace, and its JSON report parsed.

package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"time"
)

// iperf3Conns are the parallel streams (-P) of the throughput
// experiment's iperf3 rows: one, and the most loadgen's rows use.
var iperf3Conns = []int{1, 8}

// startIperf3 starts iperf3's server in the server namespace, at most
// once per Env; its error says why iperf3 cannot run here.
func (e *Env) startIperf3(ctx context.Context) error {
	e.iperf3Once.Do(func() { e.iperf3Err = e.runIperf3Server(ctx) })
	return e.iperf3Err
}

// runIperf3Server runs `iperf3 -s` where the origin listens, on the port
// every target's Iperf3 listener forwards to. It serves one test at a
// time, as the experiment runs them.
func (e *Env) runIperf3Server(ctx context.Context) error {
	if m := missing("iperf3"); m != "" {
		return errors.New(m)
	}
	port := strconv.Itoa(originPort + int(Iperf3))
	if _, err := e.start(ctx, e.server, "iperf3-server", "iperf3", "-s", "-B", e.addrs.server, "-p", port); err != nil {
		return err
	}
	if err := e.waitListening(net.JoinHostPort(e.addrs.server, port)); err != nil {
		return fmt.Errorf("iperf3 server did not start: %v: %s", err, strings.Join(strings.Fields(e.LogTail("iperf3-server")), " "))
	}
	return nil
}

// Iperf3 pushes data from the client namespace through t to the iperf3
// server over conns parallel streams for iperf3Seconds(dur), and returns
// what the server received, in Gbit/s. iperf3 exits 0 with an "error" in
// its report when it cannot connect, so the report decides.
func (e *Env) Iperf3(ctx context.Context, t *Target, conns int, dur time.Duration) (float64, error) {
	host, port, err := net.SplitHostPort(t.Addr(Iperf3))
	if err != nil {
		return 0, err
	}
	out, err := e.Client.Command(ctx, "iperf3", iperf3Args(host, port, conns, dur)...).Output()
	gbps, perr := parseIperf3(out)
	switch {
	case perr != nil:
		return 0, fmt.Errorf("%s iperf3 -P %d: %w", t.Name, conns, perr)
	case err != nil:
		return 0, fmt.Errorf("%s iperf3 -P %d: %v", t.Name, conns, err)
	}
	return gbps, nil
}

// iperf3Args are the client's arguments: TCP from client to server (the
// direction of loadgen's bulk rows), conns streams, a JSON report.
func iperf3Args(host, port string, conns int, dur time.Duration) []string {
	return []string{"-c", host, "-p", port, "-P", strconv.Itoa(conns), "-t", strconv.Itoa(iperf3Seconds(dur)), "-J"}
}

// iperf3Seconds is iperf3's -t for a window of at least dur: whole
// seconds (iperf3 takes no fraction).
func iperf3Seconds(dur time.Duration) int {
	return max(1, int(math.Ceil(dur.Seconds())))
}

// iperf3Report is the part of `iperf3 -J`'s report the rows use.
type iperf3Report struct {
	End struct {
		SumReceived struct {
			Seconds       float64 `json:"seconds"`
			Bytes         int64   `json:"bytes"`
			BitsPerSecond float64 `json:"bits_per_second"`
		} `json:"sum_received"`
	} `json:"end"`
	Error string `json:"error"`
}

// parseIperf3 reads the rate the server received at from a JSON report:
// the rate of every stream together over the whole test.
func parseIperf3(out []byte) (gbps float64, err error) {
	var r iperf3Report
	if err := json.Unmarshal(out, &r); err != nil {
		return 0, fmt.Errorf("not an iperf3 JSON report (%v): %.200s", err, out)
	}
	if r.Error != "" {
		return 0, errors.New(r.Error)
	}
	sum := r.End.SumReceived
	if sum.Bytes <= 0 || sum.Seconds <= 0 {
		return 0, errors.New("the report has no bytes received")
	}
	return sum.BitsPerSecond / 1e9, nil
}

// throughputIperf3 runs iperf3 through t with each of iperf3Conns and adds
// its samples; it returns a note for each failed run (toolRun: through an
// engine, a run counts only if /flows showed its pairs spliced by that
// engine; through auto, autoBy tallies the engine that carried them).
func (e *Env) throughputIperf3(ctx context.Context, t *Target, run int, dur time.Duration, p *progress, smp *samples, c *carriage, autoBy *carriers) []string {
	gbps := make([]float64, len(iperf3Conns))
	whats := make([]string, len(iperf3Conns))
	for i, conns := range iperf3Conns {
		whats[i] = fmt.Sprintf("iperf3 -P %d", conns)
	}
	return e.toolRuns(ctx, t, Iperf3, run, p, c, whats,
		func(i int) error {
			return e.tallied(ctx, t, Iperf3, fmt.Sprintf("iperf3_gbps_%dconn", iperf3Conns[i]), autoBy, func() (err error) {
				gbps[i], err = e.Iperf3(ctx, t, iperf3Conns[i], dur)
				return err
			})
		},
		func(i int) {
			smp.addBy("iperf3", t.Name, fmt.Sprintf("iperf3_gbps_%dconn", iperf3Conns[i]), "Gbit/s", gbps[i])
		})
}

// iperf3Notes say how the iperf3 rows were measured, or why there are
// none.
func iperf3Notes(err error, dur time.Duration, targets []*Target, c *carriage) []string {
	if err != nil {
		return []string{fmt.Sprintf("iperf3_gbps_*: n/a, %v", err)}
	}
	return toolNotes("iperf3", targets, c,
		fmt.Sprintf("iperf3_gbps_1conn, iperf3_gbps_8conn (tool iperf3): `iperf3 -c HOST -P N -t %d -J` in the client namespace through the target to `iperf3 -s` in the server namespace, client to server; the rate is the server's received bytes over the whole test (end.sum_received), its control connection forwarded beside the data streams", iperf3Seconds(dur)),
		"iperf3 vs gbps_*: gbps_* come from loadgen, Go writers and the origin's Go sink sharing the CPUs with the forwarder; iperf3 is a C client and server with 128 KiB writes: compare targets within one tool")
}
