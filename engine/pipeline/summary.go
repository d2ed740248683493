package pipeline

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"
)

// countStreams adds one WAL entry's rows to the per-stream counts; r.mu is held.
func (r *runner) countStreams(rows map[string]int64) {
	if len(rows) == 0 {
		return
	}
	if r.status.StreamRows == nil {
		r.status.StreamRows = map[string]int64{}
	}
	for s, n := range rows {
		r.status.StreamRows[s] += n
	}
}

// Summary is what `sync --once` reports when it is done: rows per pipeline and stream, and the rate over the
// whole run (start of the command to the end of the last pipeline).
type Summary struct {
	Seconds    float64           `json:"seconds"`
	Rows       int64             `json:"rows"`
	RowsPerSec float64           `json:"rows_per_sec"`
	Pipelines  []PipelineSummary `json:"pipelines"`
}

// PipelineSummary is one pipeline's part of a Summary.
type PipelineSummary struct {
	Name        string          `json:"name"`
	Rows        int64           `json:"rows"`
	RowsApplied int64           `json:"rows_applied"`
	Streams     []StreamSummary `json:"streams"`
}

// StreamSummary is the rows one stream (table) committed.
type StreamSummary struct {
	Stream string `json:"stream"`
	Rows   int64  `json:"rows"`
}

// Summarize builds the summary of a run from the pipelines' final statuses. Counts are of the last attempt of
// each pipeline: a restart starts them again from the last durable point.
func Summarize(statuses []Status, elapsed time.Duration) Summary {
	sum := Summary{Seconds: elapsed.Seconds()}
	for _, st := range statuses {
		ps := PipelineSummary{Name: st.Pipeline, Rows: st.RowsCommitted, RowsApplied: st.RowsApplied}
		for s, n := range st.StreamRows {
			ps.Streams = append(ps.Streams, StreamSummary{Stream: s, Rows: n})
		}
		slices.SortFunc(ps.Streams, func(a, b StreamSummary) int {
			return cmp.Or(cmp.Compare(b.Rows, a.Rows), cmp.Compare(a.Stream, b.Stream))
		})
		sum.Rows += ps.Rows
		sum.Pipelines = append(sum.Pipelines, ps)
	}
	if elapsed > 0 {
		sum.RowsPerSec = float64(sum.Rows) / elapsed.Seconds()
	}
	return sum
}

// WriteText writes the summary as a small table, one line per stream.
func (s Summary) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "pipeline\tstream\trows\t\n")
	for _, p := range s.Pipelines {
		for _, st := range p.Streams {
			fmt.Fprintf(tw, "%s\t%s\t%d\t\n", p.Name, st.Stream, st.Rows)
		}
		fmt.Fprintf(tw, "%s\t(all)\t%d\t\n", p.Name, p.Rows)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%d rows in %s (%.0f rows/s)\n", s.Rows, time.Duration(s.Seconds*float64(time.Second)).Round(10*time.Millisecond), s.RowsPerSec)
	return err
}
