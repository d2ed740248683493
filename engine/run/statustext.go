package run

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/skippr-dev/skippr/engine/config"
	"github.com/skippr-dev/skippr/engine/pipeline"
)

// Statuses is the status of several pipelines, in the order asked for: what `skippr status` prints.
type Statuses []PipelineStatus

// StatusOf reads the status of each pipeline (Status).
func StatusOf(ctx context.Context, home string, pipes []*config.Pipeline, log *slog.Logger) (Statuses, error) {
	var out Statuses
	for _, p := range pipes {
		ps, err := Status(ctx, home, p, log)
		if err != nil {
			return nil, err
		}
		out = append(out, ps)
	}
	return out, nil
}

// Failed names the pipelines that stopped for good.
func (s Statuses) Failed() []string {
	var failed []string
	for _, ps := range s {
		if ps.State == pipeline.StateFailed {
			failed = append(failed, ps.Pipeline)
		}
	}
	return failed
}

// WriteText prints one table row per pipeline, then the lines that do not fit in a column: re-snapshots in
// progress, sources waiting, destinations that apply on an interval, and each fault with its fix.
func (s Statuses) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PIPELINE\tSTATE\tWAL ENTRIES\tWAL BYTES\tCOMMITTED\tRECLAIMED\tAPPLIED\tSOURCE\tLAG")
	for _, ps := range s {
		state, applied, source, lag := ps.State, "-", "-", "-"
		if ps.Live != nil {
			applied = ""
			for i, d := range ps.Live.Destinations {
				if i > 0 {
					applied += ","
				}
				applied += fmt.Sprintf("%s=%d", d.Name, d.LastApplied)
			}
			if src := ps.Live.Source; src.RowsTotal > 0 {
				source = fmt.Sprintf("%d/%d (%.1f%%)", src.RowsDone, src.RowsTotal, 100*float64(src.RowsDone)/float64(src.RowsTotal))
			} else if src.RowsDone > 0 {
				source = fmt.Sprint(src.RowsDone)
			}
			lag = (time.Duration(ps.Live.Source.LagMS) * time.Millisecond).String()
			if ps.Live.Backpressure && ps.Running {
				state += " (backpressure)"
			}
		}
		if ps.WAL.Error != "" {
			state += " (WAL: " + ps.WAL.Error + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\n", ps.Pipeline, state, ps.WAL.Entries, ps.WAL.Bytes, ps.WAL.LastCommitted, ps.WAL.ReclaimedThrough, applied, source, lag)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	s.writeTables(w)
	s.writeResnapshots(w)
	s.writeWaits(w)
	s.writeFaults(w)
	return nil
}

// writeTables prints the tables each source captures (when it says), the ones a pattern captured marked, and the
// ones released (captured by a pattern, dropped at the source).
func (s Statuses) writeTables(w io.Writer) {
	for _, ps := range s {
		if ps.Live == nil || len(ps.Live.Source.Tables) == 0 {
			continue
		}
		var captured, released []string
		for _, t := range ps.Live.Source.Tables {
			switch {
			case t.Released:
				released = append(released, t.Name)
			case t.Via == "pattern":
				captured = append(captured, t.Name+" (pattern)")
			default:
				captured = append(captured, t.Name)
			}
		}
		fmt.Fprintf(w, "%s: captures %d tables: %s\n", ps.Pipeline, len(captured), strings.Join(captured, ", "))
		if len(released) > 0 {
			fmt.Fprintf(w, "%s: released (dropped at the source, destination tables kept): %s\n", ps.Pipeline, strings.Join(released, ", "))
		}
	}
}

// writeResnapshots prints one line per table being copied again.
func (s Statuses) writeResnapshots(w io.Writer) {
	for _, ps := range s {
		if ps.Live == nil {
			continue
		}
		for _, stream := range slices.Sorted(maps.Keys(ps.Live.Resnapshot)) {
			rs := ps.Live.Resnapshot[stream]
			line := fmt.Sprintf("%s: re-snapshot of %s: %s since %s", ps.Pipeline, stream, rs.State, rs.Since.UTC().Format(time.RFC3339))
			if rs.Total > 0 {
				line += fmt.Sprintf(", %d/%d rows (%.1f%%)", rs.Rows, rs.Total, 100*float64(rs.Rows)/float64(rs.Total))
			} else if rs.Rows > 0 {
				line += fmt.Sprintf(", %d rows", rs.Rows)
			}
			if rs.Reason != "" {
				line += ": " + rs.Reason
			}
			fmt.Fprintln(w, line)
		}
	}
}

// writeWaits prints sources that wait, and destinations that wait between applies: those lag by design, and
// without the line their LAG reads as a fault.
func (s Statuses) writeWaits(w io.Writer) {
	for _, ps := range s {
		if ps.Live != nil && ps.Live.Source.Waiting != "" {
			fmt.Fprintf(w, "%s: source waiting (%s): %s\n", ps.Pipeline, time.Duration(ps.Live.Source.WaitingSeconds)*time.Second, ps.Live.Source.Waiting)
		}
	}
	for _, ps := range s {
		if ps.Live == nil {
			continue
		}
		for _, d := range ps.Live.Destinations {
			if a := d.Apply; a != nil && a.Coalesce && a.MaxIntervalMS > 0 {
				from := "set in the config"
				if slices.Contains(a.FromPlugin, "max_interval") {
					from = "proposed by its plugin"
				}
				fmt.Fprintf(w, "%s: destination %s applies at most every %s (apply.max_interval, %s)\n", ps.Pipeline, d.Name, time.Duration(a.MaxIntervalMS)*time.Millisecond, from)
			}
		}
	}
}

// writeFaults prints the reason and the way out of each failed or retrying pipeline, below the table: they do
// not fit in a column.
func (s Statuses) writeFaults(w io.Writer) {
	for _, ps := range s {
		f := ps.Fault
		if f == nil || (ps.State != pipeline.StateFailed && !ps.Running) {
			continue
		}
		fmt.Fprintf(w, "\n%s: %s: %s (since %s)\n", ps.Pipeline, ps.State, f.Message, f.Since.UTC().Format(time.RFC3339))
		fmt.Fprintf(w, "  class: %s\n", f.Class)
		if f.Attempt > 0 {
			fmt.Fprintf(w, "  attempt: %d\n", f.Attempt)
		}
		if f.Entry > 0 {
			fmt.Fprintf(w, "  wal entry: %d (segment %s)\n", f.Entry, f.Segment)
		}
		if f.Fix != "" {
			fmt.Fprintf(w, "  fix: %s\n", f.Fix)
		}
	}
}
