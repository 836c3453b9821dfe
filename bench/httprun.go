// HTTP measurements shared by web and switch: a timed batch of GETs with CPU per request, and the engines splicer's metrics show splicing it.

package bench

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/splicer/splicer/loadgen"
)

// HTTPRun is one batch of GETs through a target.
type HTTPRun struct {
	RPS float64
	// Gbps is body bytes per second, in gigabits.
	Gbps float64
	// ProcUSPerReq and MachineUSPerReq are CPU microseconds per request.
	ProcUSPerReq, MachineUSPerReq float64
	P50, P99                      time.Duration
	Errors                        int64
	FirstErr                      error
}

// Bounds of a measured batch's request count.
const (
	minBatch = 20
	maxBatch = 20000
)

// httpPoint GETs url from conc clients for about dur: an unmeasured batch
// warms up and sizes the measured one from its rate. CPU is read around the
// measured batch. For an engine it also returns the engines whose splice
// counters moved during the measured batch, most splices first.
func (e *Env) httpPoint(ctx context.Context, t *Target, url string, conc int, dur time.Duration, dial loadgen.DialFunc, opts ...loadgen.Option) (HTTPRun, []string, error) {
	warm, err := loadgen.HTTPGet(ctx, dial, url, max(minBatch, 5*conc), conc, opts...)
	if err != nil {
		return HTTPRun{}, nil, fmt.Errorf("warm-up: %w", err)
	}
	n := min(max(int(warm.RPS*dur.Seconds()), minBatch), maxBatch)
	var before map[string]float64
	if !t.Peer {
		before, _ = e.spliceCounts(ctx)
	}
	pids := t.Pids()
	start := sampleCPU(pids)
	r, err := loadgen.HTTPGet(ctx, dial, url, n, conc, opts...)
	use := start.Since(pids)
	if err != nil {
		return HTTPRun{}, nil, err
	}
	var engines []string
	if before != nil {
		if after, err := e.spliceCounts(ctx); err == nil {
			engines = movedEngines(before, after)
		}
	}
	req := float64(r.Requests)
	return HTTPRun{RPS: r.RPS, Gbps: float64(r.Bytes) * 8 / r.Elapsed.Seconds() / 1e9,
		ProcUSPerReq:    use.Proc.Seconds() / req * 1e6,
		MachineUSPerReq: use.Machine.Seconds() / req * 1e6,
		P50:             r.P50, P99: r.P99, Errors: r.Errors, FirstErr: r.FirstErr}, engines, nil
}

// spliceCounts reads splicer's splices per engine (fallbacks left out) from
// its /metrics.
func (e *Env) spliceCounts(ctx context.Context) (map[string]float64, error) {
	return e.spliceCountsAt(ctx, e.AdminAddr)
}

// spliceCountsAt is spliceCounts of the splicer whose admin endpoint is
// addr.
func (e *Env) spliceCountsAt(ctx context.Context, addr string) (map[string]float64, error) {
	counts := map[string]float64{}
	err := e.metricLines(ctx, addr, func(line string) bool {
		if engine, v, ok := parseSpliceLine(line); ok {
			counts[engine] += v
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	return counts, nil
}

// metricLines fetches the /metrics of the splicer whose admin endpoint
// is addr on the forwarder host and calls each with every line, until
// each returns false.
func (e *Env) metricLines(ctx context.Context, addr string, each func(line string) bool) error {
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/metrics", nil)
	if err != nil {
		return err
	}
	resp, err := e.admin().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if !each(sc.Text()) {
			return nil
		}
	}
	return sc.Err()
}

// parseSpliceLine reads a line such as
// splicer_splice_transitions_total{engine="copy",outcome="limit"} 12;
// fallback outcomes are not splices and do not count.
func parseSpliceLine(line string) (engine string, v float64, ok bool) {
	rest, found := strings.CutPrefix(line, "splicer_splice_transitions_total{")
	if !found || strings.Contains(rest, `outcome="fallback"`) {
		return "", 0, false
	}
	labels, value, found := strings.Cut(rest, "} ")
	if !found {
		return "", 0, false
	}
	for _, l := range strings.Split(labels, ",") {
		if name, ok := strings.CutPrefix(l, `engine="`); ok {
			engine = strings.TrimSuffix(name, `"`)
		}
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
	return engine, v, err == nil && engine != ""
}

// movedEngines are the engines whose count grew, most first.
func movedEngines(before, after map[string]float64) []string {
	var out []string
	for en, v := range after {
		if v > before[en] {
			out = append(out, en)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return after[out[i]]-before[out[i]] > after[out[j]]-before[out[j]]
	})
	return out
}

// addSeen records the engines seen splicing for key (target and mode).
func addSeen(seen map[string]map[string]bool, key string, engines []string) {
	if seen[key] == nil {
		seen[key] = map[string]bool{}
	}
	for _, en := range engines {
		seen[key][en] = true
	}
}

// seenNotes say, per target and mode, which engines splicer's metrics
// counted splices for while it was measured.
func seenNotes(seen map[string]map[string]bool) []string {
	keys := make([]string, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var same []string
	var notes []string
	for _, k := range keys {
		var ens []string
		for en := range seen[k] {
			ens = append(ens, en)
		}
		slices.Sort(ens)
		name, _, _ := strings.Cut(k, " ")
		switch {
		case len(ens) == 1 && ens[0] == name:
			same = append(same, k)
		case len(ens) == 0:
			notes = append(notes, k+": no splice counted in splicer's metrics (stayed in control mode)")
		default:
			notes = append(notes, fmt.Sprintf("%s: splices counted for %s (per splicer_splice_transitions_total; an engine that declines falls back to the next)", k, strings.Join(ens, ", ")))
		}
	}
	if len(same) > 0 {
		notes = append([]string{fmt.Sprintf("splicer's metrics counted splices only by the engine the row names for: %s", strings.Join(same, "; "))}, notes...)
	}
	return notes
}
