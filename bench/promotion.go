// Which engine carried engine auto's pairs at the end of a run: copy, where auto starts a pair, or the engine it promoted the pair to, from splicer's counters.

package bench

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
)

// carriers tallies, per row of an auto target, the engine that carried its
// pairs at the end of the runs counted into the row, over every run.
type carriers struct {
	rows  []string
	pairs map[string]map[string]float64 // row, engine
}

func newCarriers() *carriers { return &carriers{pairs: map[string]map[string]float64{}} }

// add counts one run's pairs into row's tally.
func (c *carriers) add(row string, by map[string]float64) {
	if c.pairs[row] == nil {
		c.pairs[row] = map[string]float64{}
		c.rows = append(c.rows, row)
	}
	for en, n := range by {
		c.pairs[row][en] += n
	}
}

// note says, per row, how many of auto's pairs each engine carried at the
// end; "" if no run through auto counted.
func (c *carriers) note(t string) string {
	if len(c.rows) == 0 {
		return ""
	}
	parts := make([]string, len(c.rows))
	for i, row := range c.rows {
		parts[i] = row + ": " + describeCarriers(c.pairs[row])
	}
	return fmt.Sprintf("%s: a tcp listener with no engine (auto: a pair starts on copy and is promoted to ip past promote.after_bytes, 192 KiB, or promote.after, 200 ms); pairs by the engine that carried them at the end, over the rows' runs (splicer_promotions_total and splicer_connections_accepted_total of its listener; iperf3's control connection included): %s",
		t, strings.Join(parts, "; "))
}

// describeCarriers is "ip 8/8 pairs" or "ip 6, copy 2 (not promoted) of
// 8 pairs", most first.
func describeCarriers(by map[string]float64) string {
	var ens []string
	var total float64
	for en, n := range by {
		if n > 0 {
			ens = append(ens, en)
			total += n
		}
	}
	if len(ens) == 0 {
		return "no pair"
	}
	slices.SortFunc(ens, func(x, y string) int {
		return cmp.Or(cmp.Compare(by[y], by[x]), strings.Compare(x, y))
	})
	if len(ens) == 1 {
		return fmt.Sprintf("%s %.0f/%.0f pairs", ens[0], by[ens[0]], total)
	}
	parts := make([]string, len(ens))
	for i, en := range ens {
		parts[i] = fmt.Sprintf("%s %.0f", en, by[en])
		if en == "copy" {
			parts[i] += " (not promoted)"
		}
	}
	return fmt.Sprintf("%s of %.0f pairs", strings.Join(parts, ", "), total)
}

// carriedBy runs fn through listener and returns the engine that carried
// each pair the listener accepted meanwhile at the end: the engine it was
// promoted to (splicer_promotions_total), else copy. The map is nil
// when /metrics could not be read: the run counts, untallied.
func (e *Env) carriedBy(ctx context.Context, listener string, fn func() error) (map[string]float64, error) {
	before, berr := e.scrapeAt(ctx, e.AdminAddr)
	if err := fn(); err != nil {
		return nil, err
	}
	after, aerr := e.scrapeAt(ctx, e.AdminAddr)
	if berr != nil || aerr != nil {
		return nil, nil
	}
	return endEngines(listener, before, after), nil
}

// endEngines reads carriedBy's answer from two scrapes of /metrics.
func endEngines(listener string, before, after map[string]float64) map[string]float64 {
	by := map[string]float64{}
	var accepted, promoted float64
	eachGrowth(before, after, func(name string, l map[string]string, d float64) {
		if l["listener"] != listener {
			return
		}
		switch name {
		case "splicer_connections_accepted_total":
			accepted += d
		case "splicer_promotions_total":
			by[l["to"]] += d
			promoted += d
		}
	})
	if accepted > promoted {
		by["copy"] += accepted - promoted
	}
	return by
}

// tallied runs fn, one run through t's listener for service svc; through
// an auto target it adds the engines that carried the run's pairs at the
// end to c under row, if fn succeeded.
func (e *Env) tallied(ctx context.Context, t *Target, svc Service, row string, c *carriers, fn func() error) error {
	if !t.Auto {
		return fn()
	}
	by, err := e.carriedBy(ctx, t.Name+"-"+svc.String(), fn)
	if by != nil {
		c.add(row, by)
	}
	return err
}
