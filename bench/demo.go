// The demo: every engine and peer once, a short bulk transfer and a 1-byte request/response each, as one table.

package bench

import (
	"context"
	"fmt"
	"io"
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

// Demo measures every available target briefly and returns the rows, with
// unavailable targets as rows whose Note says why.
func (e *Env) Demo(ctx context.Context, bulkFor, rrFor time.Duration, progress io.Writer) ([]DemoRow, error) {
	var rows []DemoRow
	for _, t := range e.Targets {
		row := DemoRow{Target: t.Name, Note: t.Unavailable}
		if t.Unavailable != "" {
			rows = append(rows, row)
			continue
		}
		fmt.Fprintf(progress, "  %-15s bulk...", t.Name)
		var b BulkRun
		seen, err := e.EngineSeen(ctx, t, func() (err error) {
			b, err = e.Bulk(ctx, t, 1, bulkFor)
			return err
		})
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(progress, " rr...")
		r, err := e.RR(ctx, t, 1, rrFor)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(progress, " done\n")
		row.Gbps, row.ProcSPerGB, row.MachineSPerGB, row.RR1TPS = b.Gbps, b.ProcSPerGB, b.MachineSPerGB, r.TPS
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
		rows = append(rows, row)
	}
	return rows, nil
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
