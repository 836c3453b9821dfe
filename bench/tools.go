// Runs through an engine count only where /flows shows their pairs spliced by the engine their row names (carriage); the field's tools (sockperf, iperf3) run through a target under that rule.

package bench

import (
	"context"
	"fmt"
	"slices"
)

// carriage decides which runs of an experiment through engine targets
// count: a run whose pairs /flows did not show spliced by the engine its
// row names measured something else (a fallback, control mode), so it is
// left out with a note, and counted.
type carriage struct {
	// seen is the engine /flows showed for each target's runs: its own
	// once one run was carried, else the other engine a run showed
	// (engineNotes).
	seen map[string]string
	// left counts the runs left out.
	left int
}

func newCarriage() *carriage { return &carriage{seen: map[string]string{}} }

// carried reports whether a run through t counts: through a peer or auto
// (which picks each pair's engine itself) always; through an engine only if /flows showed every pair of the run spliced by
// t's engine. splicedBy has the engine /flows showed for each pair of the
// run ("" for a pair not seen spliced). A run that does not count is
// counted, and note says why it is left out (what names the run).
func (c *carriage) carried(t *Target, run int, what string, splicedBy []string) (note string, ok bool) {
	if t.Peer || t.Auto {
		return "", true
	}
	other := slices.IndexFunc(splicedBy, func(engine string) bool { return engine != t.Name })
	if len(splicedBy) > 0 && other < 0 {
		c.seen[t.Name] = t.Name
		return "", true
	}
	c.left++
	if other >= 0 && splicedBy[other] != "" && c.seen[t.Name] != t.Name {
		c.seen[t.Name] = splicedBy[other]
	}
	return fmt.Sprintf("run %d %s %s: /flows did not show the pairs spliced by %s (saw %q): run left out", run+1, t.Name, what, t.Name, splicedBy), false
}

// leftNotes says how many runs were left out, if any: rows then hold
// fewer runs than the experiment made.
func (c *carriage) leftNotes(what string) []string {
	if c.left == 0 {
		return nil
	}
	return []string{fmt.Sprintf("%s: %d run(s) through an engine left out, /flows not showing their pairs spliced by the engine the row names (notes above)", what, c.left)}
}

// toolRuns runs one measurement by an outside tool through t's listener
// for service svc per item of whats (measure(i), a progress step each),
// and calls add(i) for each that counts (toolRun); it returns the notes of
// those that did not.
func (e *Env) toolRuns(ctx context.Context, t *Target, svc Service, run int, p *progress, c *carriage, whats []string, measure func(i int) error, add func(i int)) []string {
	var notes []string
	for i, what := range whats {
		p.step(fmt.Sprintf("run %d %s %s", run+1, t.Name, what))
		note := e.toolRun(ctx, t, svc, run, what, c, func() error { return measure(i) })
		if ctx.Err() != nil {
			return notes
		}
		if note != "" {
			notes = append(notes, note)
			continue
		}
		add(i)
	}
	return notes
}

// toolRun runs fn, one measurement by an outside tool through t's
// listener for service svc, and returns "" if it counts or the note that
// says why not: fn's error, or, through an engine, pairs that /flows did
// not show spliced by that engine (c; the tool dials by itself, so the
// harness cannot wait for the splice before its first byte as it does for
// loadgen, and reads the engine of the first pair spliced meanwhile).
// what names the run in notes ("sockperf14", "iperf3 -P 8").
func (e *Env) toolRun(ctx context.Context, t *Target, svc Service, run int, what string, c *carriage, fn func() error) string {
	if t.Peer || t.Auto {
		if err := fn(); err != nil {
			return fmt.Sprintf("run %d %v", run+1, err)
		}
		return ""
	}
	engine, err := e.engineSeenOn(ctx, t.Name+"-"+svc.String(), fn)
	if err != nil {
		return fmt.Sprintf("run %d %v", run+1, err)
	}
	note, _ := c.carried(t, run, what, []string{engine})
	return note
}

// toolNotes are the notes of tool's rows: how they were measured
// (method), then which engines /flows confirmed and how many runs it did
// not.
func toolNotes(tool string, targets []*Target, c *carriage, method ...string) []string {
	notes := method
	for _, n := range engineNotes(targets, c.seen) {
		notes = append(notes, tool+": "+n)
	}
	return append(notes, c.leftNotes(tool)...)
}
