package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/skippr-dev/skippr/engine/pipeline"
	"github.com/skippr-dev/skippr/engine/run"
)

func statusCommand(g *globals) *cli.Command {
	return &cli.Command{
		Name:      "status",
		Usage:     "show each pipeline's WAL depth, committed and applied points, source progress and lag",
		ArgsUsage: "[PIPELINE...]",
		Description: `A pipeline that stopped for good shows as failed, with the reason, its class (config, data,
resnapshot), the time, the WAL entry when the fault is in the log, and the fix; one that retries shows as
retrying with the attempt and the last error. Exits 1 when any pipeline shown has failed.`,
		Flags: []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print JSON for scripts"}},
		Action: func(ctx context.Context, c *cli.Command) error {
			_, pipes, err := configuredPipelines(c, g)
			if err != nil {
				return err
			}
			var out []run.PipelineStatus
			for _, p := range pipes {
				ps, err := run.Status(ctx, g.Home, p, g.Log)
				if err != nil {
					return err
				}
				out = append(out, ps)
			}
			var failed []string
			for _, ps := range out {
				if ps.State == pipeline.StateFailed {
					failed = append(failed, ps.Pipeline)
				}
			}
			if c.Bool("json") {
				enc := json.NewEncoder(c.Root().Writer)
				enc.SetIndent("", "  ")
				if err := enc.Encode(out); err != nil {
					return err
				}
			} else if err := printStatus(c.Root().Writer, out); err != nil {
				return err
			}
			if len(failed) > 0 {
				return withCode(exitFailure, fmt.Errorf("failed: %s", strings.Join(failed, ", ")))
			}
			return nil
		},
	}
}

func printStatus(w io.Writer, out []run.PipelineStatus) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PIPELINE\tSTATE\tWAL ENTRIES\tWAL BYTES\tCOMMITTED\tRECLAIMED\tAPPLIED\tSOURCE\tLAG")
	for _, ps := range out {
		state, applied, source, lag := ps.State, "-", "-", "-"
		if ps.Live != nil {
			applied = ""
			for i, d := range ps.Live.Destinations {
				if i > 0 {
					applied += ","
				}
				applied += fmt.Sprintf("%s=%d", d.Name, d.LastApplied)
			}
			if s := ps.Live.Source; s.RowsTotal > 0 {
				source = fmt.Sprintf("%d/%d (%.1f%%)", s.RowsDone, s.RowsTotal, 100*float64(s.RowsDone)/float64(s.RowsTotal))
			} else if s.RowsDone > 0 {
				source = fmt.Sprint(s.RowsDone)
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
	for _, ps := range out {
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
	for _, ps := range out {
		if ps.Live != nil && ps.Live.Source.Waiting != "" {
			fmt.Fprintf(w, "%s: source waiting (%s): %s\n", ps.Pipeline, time.Duration(ps.Live.Source.WaitingSeconds)*time.Second, ps.Live.Source.Waiting)
		}
	}
	// A destination that waits between applies lags by design: say so, or its LAG reads as a fault.
	for _, ps := range out {
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
	// The reason and the way out, below the table: they do not fit in a column.
	for _, ps := range out {
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
	return nil
}
