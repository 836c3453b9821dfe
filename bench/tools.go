// Runs of the field's tools (sockperf, iperf3) through a target: one counts only where /flows shows its pairs spliced by the engine its row names, and the notes say how they were measured.

package bench

import (
	"context"
	"fmt"
)

// toolRuns runs one measurement by an outside tool through t's listener
// for service svc per item of whats (measure(i), a progress step each),
// and calls add(i) for each that counts (toolRun); it returns the notes of
// those that did not.
func (e *Env) toolRuns(ctx context.Context, t *Target, svc Service, run int, p *progress, seen map[string]string, whats []string, measure func(i int) error, add func(i int)) []string {
	var notes []string
	for i, what := range whats {
		p.step(fmt.Sprintf("run %d %s %s", run+1, t.Name, what))
		note := e.toolRun(ctx, t, svc, run, what, seen, func() error { return measure(i) })
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
// not show spliced by that engine (the tool dials by itself, so the
// harness cannot wait for the splice before its first byte as it does for
// loadgen). seen takes the engine /flows showed. what names the run in
// notes ("sockperf14", "iperf3 -P 8").
func (e *Env) toolRun(ctx context.Context, t *Target, svc Service, run int, what string, seen map[string]string, fn func() error) string {
	if t.Peer {
		if err := fn(); err != nil {
			return fmt.Sprintf("run %d %v", run+1, err)
		}
		return ""
	}
	engine, err := e.engineSeenOn(ctx, t.Name+"-"+svc.String(), fn)
	switch {
	case err != nil:
		return fmt.Sprintf("run %d %v", run+1, err)
	case engine != t.Name:
		return fmt.Sprintf("run %d %s %s: /flows did not show the pairs spliced by %s (saw %q): run left out", run+1, t.Name, what, t.Name, engine)
	}
	seen[t.Name] = engine
	return ""
}

// toolNotes are the notes of tool's rows: how they were measured
// (method), then which engines /flows confirmed.
func toolNotes(tool string, targets []*Target, seen map[string]string, method ...string) []string {
	notes := method
	for _, n := range engineNotes(targets, seen) {
		notes = append(notes, tool+": "+n)
	}
	return notes
}
