package pipeline

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/skippr-dev/skippr/engine/resnapshot"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
)

// Resnapshots is where `skippr resnapshot` requests wait for the runner (engine/resnapshot.Store).
type Resnapshots interface {
	Pending() ([]resnapshot.Request, error)
	Done([]resnapshot.Request) error
}

// DefaultResnapshotPoll is how often a running pipeline looks for new requests: a person waits for it, nothing
// else does.
const DefaultResnapshotPoll = time.Second

// ResnapshotStatus is one stream's re-snapshot as `skippr status` shows it.
type ResnapshotStatus struct {
	// State: "requested" (waiting for the source to take it), "copying" (after the begin mark, or while the
	// source reports the copy's gauges), "done" (the end mark, or resnapshot_copying 0: resnapshotProgress) or
	// "refused" (Reason says why; the request is dropped). A table added to a running pipeline shows as copying
	// and done too, without a request.
	State  string    `json:"state"`
	Reason string    `json:"reason,omitempty"`
	Since  time.Time `json:"since"`
	Rows   int64     `json:"rows,omitempty"`  // rows copied so far, as the source reports them
	Total  int64     `json:"total,omitempty"` // rows expected (an estimate)
}

// errReread ends one Read so the next starts from the last durable checkpoint with new resnapshot requests.
var errReread = errors.New("source read restarts for a resnapshot request")

// newResnapshots returns the requests not yet handed to the source, refusing (and dropping) the ones the source
// cannot copy or a destination cannot apply: a refused request never reaches the source, and the pipeline goes
// on.
func (r *runner) newResnapshots(included []resnapshot.Request) []resnapshot.Request {
	if r.cfg.Resnapshots == nil {
		return nil
	}
	pending, err := r.cfg.Resnapshots.Pending()
	if err != nil {
		r.log.Warn("resnapshot requests cannot be read; retrying", "err", err)
		return nil
	}
	var fresh, refused []resnapshot.Request
	for _, p := range pending {
		if slices.ContainsFunc(included, func(q resnapshot.Request) bool { return q.ID == p.ID }) {
			continue
		}
		if reason := r.resnapshotRefusal(); reason != "" {
			r.log.Error("resnapshot request refused", "stream", p.Stream, "reason", reason)
			r.setResnapshot(p.Stream, ResnapshotStatus{State: "refused", Reason: reason})
			refused = append(refused, p)
			continue
		}
		fresh = append(fresh, p)
	}
	if len(refused) > 0 {
		if err := r.cfg.Resnapshots.Done(refused); err != nil {
			r.log.Warn("refused resnapshot requests cannot be removed", "err", err)
		}
	}
	return fresh
}

// resnapshotRefusal says why this pipeline cannot carry out a re-snapshot, or "".
func (r *runner) resnapshotRefusal() string {
	if !r.cfg.SourceResnapshots {
		plugin := r.cfg.SourcePlugin
		if plugin == "" {
			plugin = "?"
		}
		return fmt.Sprintf("source %s (plugin %s) cannot re-snapshot a table (it offers no %s service); re-create the pipeline under a new name to copy everything again", r.cfg.Source.Name, plugin, protocol.ServiceResnapshot)
	}
	if d := r.lacksResnapshot(); d != "" {
		return "destination " + d + " cannot apply a re-snapshot (it would keep rows the source deleted); remove it from the pipeline or re-create the pipeline under a new name"
	}
	return ""
}

// lacksResnapshot names a destination without the resnapshot capability, or "".
func (r *runner) lacksResnapshot() string {
	for i, d := range r.cfg.Destinations {
		if i >= len(r.caps) || !r.caps[i].Resnapshot {
			return d.Name
		}
	}
	return ""
}

// resnapshotsTaken drops the requests of this Read: a durable checkpoint carries them now, and the source resumes
// them from it.
func (r *runner) resnapshotsTaken(included []resnapshot.Request) {
	if err := r.cfg.Resnapshots.Done(included); err != nil {
		r.log.Warn("resnapshot requests cannot be removed; the source keeps them in its checkpoint anyway", "err", err)
	}
}

func (r *runner) setResnapshot(stream string, s ResnapshotStatus) {
	r.mu.Lock()
	if r.status.Resnapshot == nil {
		r.status.Resnapshot = map[string]ResnapshotStatus{}
	}
	old := r.status.Resnapshot[stream]
	s.Since = time.Now().UTC()
	if s.State == old.State {
		s.Since = old.Since
	}
	if s.State == "copying" && old.State == "copying" {
		s.Rows, s.Total = old.Rows, old.Total
	}
	r.status.Resnapshot[stream] = s
	r.mu.Unlock()
	r.publish(true)
}

// resnapshotProgress follows the streams being copied again from a checkpoint's gauges, labelled by table, the
// convention sources follow: resnapshot_rows and resnapshot_rows_total are a copy's rows done and total, and
// they say it runs ("copying", from any state); resnapshot_copying 0 says it ended ("done", with its final
// figures). The gauges, not the re-snapshot marks alone, carry the state because a copy without a key (a table
// in mode: append of the postgres source, re-snapshotted or added to the pipeline) sends no marks, and because
// they show a copy a restarted run resumes from its checkpoint. A missing gauge says nothing: a source that
// reports no resnapshot_copying ends its copies with the end mark.
func (r *runner) resnapshotProgress(cp *SourceCheckpoint) {
	type seen struct {
		rows, total  int64
		figures, end bool
	}
	tables := map[string]*seen{}
	for _, m := range cp.Metrics {
		t, ok := m.Labels["table"]
		if !ok {
			continue
		}
		s := tables[t]
		if s == nil {
			s = &seen{}
		}
		switch m.Name {
		case "resnapshot_rows":
			s.rows, s.figures = int64(m.Value), true
		case "resnapshot_rows_total":
			s.total, s.figures = int64(m.Value), true
		case "resnapshot_copying":
			s.end = m.Value == 0
		default:
			continue
		}
		tables[t] = s
	}
	if len(tables) == 0 {
		return
	}
	r.mu.Lock()
	if r.status.Resnapshot == nil {
		r.status.Resnapshot = map[string]ResnapshotStatus{}
	}
	now, changed := time.Now().UTC(), false
	for t, s := range tables {
		st, state := r.status.Resnapshot[t], "copying"
		if s.end {
			state = "done"
		} else if !s.figures {
			continue
		}
		if st.State != state {
			st, changed = ResnapshotStatus{State: state, Since: now}, true
		}
		if s.figures {
			st.Rows, st.Total = s.rows, s.total
		}
		r.status.Resnapshot[t] = st
	}
	r.mu.Unlock()
	if changed {
		r.publish(true)
	}
}

func streamsOf(reqs []resnapshot.Request) []string {
	var out []string
	for _, q := range reqs {
		if !slices.Contains(out, q.Stream) {
			out = append(out, q.Stream)
		}
	}
	return out
}
