package fleet

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// Unheld counts the pipelines no worker runs: being handed over, or waiting for a worker.
func (st *Status) Unheld() int {
	n := 0
	for _, p := range st.Pipelines {
		if p.Holder == "" {
			n++
		}
	}
	return n
}

// WriteText prints the workers, then the pipelines; AS OF is how long before now their holder published the
// LAG shown.
func (st *Status) WriteText(w io.Writer, now time.Time) error {
	if s := st.Stale; s != nil {
		fmt.Fprintf(w, "STALE: %s\n  reason: %s\n  shown: %s.\n  A worker cut off from etcd stops its pipelines when its lease runs out: the holders below may have stopped.\n\n",
			s.Headline(now), s.Reason, s.Source)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKER\tSTATE\tPIPELINES\tVERSION\tHOST\tPID\tSTARTED")
	for _, m := range st.Workers {
		state := "alive"
		if m.Draining {
			state = "draining"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d\t%s\n", m.Name, state, len(m.Pipelines), m.Version, m.Host, m.PID, m.Started.Format(time.RFC3339))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PIPELINE\tHOLDER\tEPOCH\tSINCE\tASSIGNED\tLAG\tAS OF\tLAST ERROR")
	for _, p := range st.Pipelines {
		holder, since, epoch, lag, asOf := p.Holder, "", "", "-", "-"
		if holder == "" {
			holder = "-"
		} else {
			since, epoch = p.Since.Format(time.RFC3339), fmt.Sprint(p.Epoch)
		}
		if p.Progress != nil {
			lag = fmt.Sprintf("%d entries, %s", p.LagEntries, (time.Duration(p.LagSeconds * float64(time.Second))).Round(100*time.Millisecond))
			asOf = now.Sub(p.Published).Round(100*time.Millisecond).String() + " ago"
		}
		last := ""
		if p.LastError != nil {
			last = fmt.Sprintf("%s (%s, %s)", p.LastError.Error, p.LastError.Worker, p.LastError.Time.Format(time.RFC3339))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Name, holder, epoch, since, p.Assigned, lag, asOf, last)
	}
	return tw.Flush()
}

// Headline says that etcd is unreachable and since when.
func (s *Stale) Headline(now time.Time) string {
	if s.Since.IsZero() {
		return "etcd unreachable; the fleet's records carry no time"
	}
	return fmt.Sprintf("etcd unreachable since %s (%s ago, when it was last seen working): the fleet as of then",
		s.Since.UTC().Format(time.RFC3339), now.Sub(s.Since).Round(time.Second))
}
