// The demo: every engine and peer, a short bulk transfer each and 1-byte request/response in interleaved rounds, as one table.

package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"
)

// DemoRow is one line of the demo table.
type DemoRow struct {
	Target        string
	Gbps          float64
	ProcSPerGB    float64
	MachineSPerGB float64
	RR1TPS        float64
	Note          string
}

// DemoRRRounds is how many 1-byte request/response runs the demo makes
// per target, the targets interleaved; the table shows their median. One
// run per target swung from 7.9k to 37.7k txn/s for the same engine from
// one demo to the next (where the scheduler put the relay beside its
// peers on two CPUs), more than the engines' differences.
const DemoRRRounds = 3

// Demo measures every available target briefly and returns the rows, with
// unavailable targets as rows whose Note says why: a bulk transfer of
// bulkFor each, then DemoRRRounds rounds of 1-byte request/response
// through every target in turn, rrFor per target in all.
func (e *Env) Demo(ctx context.Context, bulkFor, rrFor time.Duration, progress io.Writer) ([]DemoRow, error) {
	rows := make([]DemoRow, len(e.Targets))
	for i, t := range e.Targets {
		rows[i] = DemoRow{Target: t.Name, Note: t.Unavailable}
		if t.Unavailable != "" {
			continue
		}
		fmt.Fprintf(progress, "  %-15s bulk...", t.Name)
		if err := e.demoBulk(ctx, t, bulkFor, &rows[i]); err != nil {
			return nil, err
		}
		fmt.Fprintf(progress, " done\n")
	}
	fmt.Fprintf(progress, "  1-byte request/response, %d rounds through every target:", DemoRRRounds)
	tps := make([][]float64, len(e.Targets))
	for round := range DemoRRRounds {
		fmt.Fprintf(progress, " %d", round+1)
		for i, t := range e.Targets {
			if t.Unavailable != "" {
				continue
			}
			r, err := e.RR(ctx, t, 1, rrFor/DemoRRRounds)
			if err != nil {
				return nil, err
			}
			tps[i] = append(tps[i], r.TPS)
		}
	}
	fmt.Fprintf(progress, " done\n")
	for i := range rows {
		if len(tps[i]) > 0 {
			slices.Sort(tps[i])
			rows[i].RR1TPS = median(tps[i])
		}
	}
	return rows, nil
}

// demoBulk measures t's bulk transfer into row and says in its note
// whether /flows showed the engine named t splicing it.
func (e *Env) demoBulk(ctx context.Context, t *Target, bulkFor time.Duration, row *DemoRow) error {
	var b BulkRun
	seen, err := e.EngineSeen(ctx, t, func() (err error) {
		b, err = e.Bulk(ctx, t, 1, bulkFor)
		return err
	})
	if err != nil {
		return err
	}
	row.Gbps, row.ProcSPerGB, row.MachineSPerGB = b.Gbps, b.ProcSPerGB, b.MachineSPerGB
	if !t.Peer {
		switch {
		case seen == "":
			row.Note = "engine not confirmed in /flows"
		case seen != t.Name:
			row.Note = "fell back to " + seen
		default:
			row.Note = "spliced by " + seen + " (/flows)"
		}
	}
	return nil
}

// WriteDemoTable prints rows as a Markdown table.
func WriteDemoTable(w io.Writer, rows []DemoRow) {
	fmt.Fprintln(w, "| forwarder | Gbit/s (1 conn) | forwarder CPU s/GB | machine CPU s/GB | 1-byte txn/s | note |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---|")
	for _, r := range rows {
		if r.Gbps == 0 {
			fmt.Fprintf(w, "| %s | n/a | n/a | n/a | n/a | %s |\n", r.Target, r.Note)
			continue
		}
		fmt.Fprintf(w, "| %s | %.2f | %.3f | %.3f | %.0f | %s |\n", r.Target, r.Gbps, r.ProcSPerGB, r.MachineSPerGB, r.RR1TPS, r.Note)
	}
}
