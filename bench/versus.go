// The wrk rows' summary of splicer's default (auto) against HAProxy per object size: rate ratio and p99s, marking where the runs' ranges overlap.

package bench

import (
	"fmt"
	"strings"
)

// versusNote says, per object size, how a's wrk rows compare with b's:
// the ratio of the median rates and both median p99s, each marked "(tie)"
// where the two targets' min–max ranges over the runs overlap, so that a
// reader does not take noise for a lead. "" when either has no rows.
func versusNote(res *Result, sizes []int64, a, b string) string {
	var parts []string
	for _, size := range sizes {
		l := sizeLabel(size)
		ra, okA := res.Row(a, "wrk_rps_"+l)
		rb, okB := res.Row(b, "wrk_rps_"+l)
		pa, okPA := res.Row(a, "wrk_p99_ms_"+l)
		pb, okPB := res.Row(b, "wrk_p99_ms_"+l)
		if !okA || !okB || !okPA || !okPB || rb.Value == 0 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s: %.2fx%s, p99 %.1f / %.1f ms%s",
			l, ra.Value/rb.Value, tieMark(ra, rb), pa.Value, pb.Value, tieMark(pa, pb)))
	}
	if len(parts) == 0 {
		return ""
	}
	return fmt.Sprintf("%s against %s (wrk, medians; \"(tie)\": the runs' min–max ranges overlap): %s", a, b, strings.Join(parts, "; "))
}

// tieMark is " (tie)" when x's and y's ranges over the runs overlap.
func tieMark(x, y Row) string {
	if x.Min <= y.Max && y.Min <= x.Max {
		return " (tie)"
	}
	return ""
}

// ceilingNote says, per object size, what share of the ceiling's wrk rate
// (route: the origin with no proxy between) each of targets delivered, so
// that a reader sees how much room a lead over a peer could have: little
// for small objects, where no proxy can beat one connection fewer. "" when
// the ceiling has no rows.
func ceilingNote(res *Result, sizes []int64, ceiling string, targets ...string) string {
	var parts []string
	for _, size := range sizes {
		l := sizeLabel(size)
		c, ok := res.Row(ceiling, "wrk_rps_"+l)
		if !ok || c.Value == 0 {
			continue
		}
		var shares []string
		for _, t := range targets {
			if r, ok := res.Row(t, "wrk_rps_"+l); ok {
				shares = append(shares, fmt.Sprintf("%s %.2f", t, r.Value/c.Value))
			}
		}
		parts = append(parts, fmt.Sprintf("%s: %.0f req/s; %s", l, c.Value, strings.Join(shares, ", ")))
	}
	if len(parts) == 0 {
		return ""
	}
	return fmt.Sprintf("share of %s's rate (wrk, medians; %s: the client reaches the origin through the forwarder namespace's kernel routing, no proxy between; a proxy beats it only where two shorter TCP connections open their windows faster than one): %s", ceiling, ceiling, strings.Join(parts, "; "))
}
