package pipeline

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/skippr-dev/skippr/engine/resnapshot"
	pluginv1 "github.com/skippr-dev/skippr/plugin-sdk/proto/skippr/plugin/v1"
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
	// State: "requested" (waiting for the source to take it), "copying" (between the marks), "done" or
	// "refused" (Reason says why; the request is dropped).
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
		if c := r.caps[i]; c == nil || !c.Resnapshot {
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

// resnapshotProgress takes the rows done and total of the streams being copied from a checkpoint's gauges
// (resnapshot_rows and resnapshot_rows_total, labelled by table), the convention sources follow.
func (r *runner) resnapshotProgress(cp *pluginv1.Checkpoint) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range cp.Metrics {
		t := m.Labels["table"]
		s, ok := r.status.Resnapshot[t]
		if !ok || s.State != "copying" {
			continue
		}
		switch m.Name {
		case "resnapshot_rows":
			s.Rows = int64(m.Value)
		case "resnapshot_rows_total":
			s.Total = int64(m.Value)
		}
		r.status.Resnapshot[t] = s
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
