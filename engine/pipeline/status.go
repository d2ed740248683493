package pipeline

import (
	"maps"
	"time"
)

// Status is what `skippr status` shows of a running pipeline.
type Status struct {
	Pipeline      string              `json:"pipeline"`
	PID           int                 `json:"pid"`
	Updated       time.Time           `json:"updated"`
	State         string              `json:"state"`
	Backpressure  bool                `json:"backpressure"`
	DiskFull      bool                `json:"disk_full,omitempty"` // the WAL's disk is full: reads wait, apply goes on
	WAL           WALStatus           `json:"wal"`
	Destinations  []DestinationStatus `json:"destinations"`
	Source        SourceStatus        `json:"source"`
	RowsCommitted int64               `json:"rows_committed"`
	RowsApplied   int64               `json:"rows_applied"`
	// Fault is set while the pipeline is retrying (State "retrying") or after it stopped for good (State
	// "failed").
	Fault *Fault `json:"fault,omitempty"`
	// StreamRows is RowsCommitted by stream (table), for the summary of `sync --once`.
	StreamRows map[string]int64 `json:"stream_rows,omitempty"`
	// Resnapshot is each stream's re-snapshot (`skippr resnapshot`) seen by this run.
	Resnapshot map[string]ResnapshotStatus `json:"resnapshot,omitempty"`
}

// Fault is why a pipeline is not running normally, and what a person does about it.
type Fault struct {
	Message string    `json:"message"`
	Class   string    `json:"class"`
	Fix     string    `json:"fix,omitempty"`
	Since   time.Time `json:"since"`
	// Attempt counts consecutive failed runs (State "retrying").
	Attempt int `json:"attempt,omitempty"`
	// Entry and Segment name the WAL entry apply stopped at, when the fault is in the log.
	Entry   uint64 `json:"entry,omitempty"`
	Segment string `json:"segment,omitempty"`
}

// Pipeline states a supervisor sets around the runner's own ("running", "backpressure", "apply paused",
// "stopped").
const (
	StateRetrying = "retrying"
	StateFailed   = "failed"
	StateWaiting  = "waiting"
)

// WALStatus is the log's depth and cut points.
type WALStatus struct {
	URL              string `json:"url"`
	Entries          int    `json:"entries"`
	Bytes            int64  `json:"bytes"`
	LastCommitted    uint64 `json:"last_committed"`
	ReclaimedThrough uint64 `json:"reclaimed_through"`
	UnappliedBytes   int64  `json:"unapplied_bytes"`
}

// DestinationStatus is one destination's applied point.
type DestinationStatus struct {
	Name        string `json:"name"`
	LastApplied uint64 `json:"last_applied"`
	// Apply is the destination's effective apply limits, after its plugin's proposals.
	Apply *ApplyStatus `json:"apply,omitempty"`
}

// SourceStatus is the source's latest checkpoint and progress.
type SourceStatus struct {
	Checkpoint string `json:"checkpoint"`
	RowsDone   int64  `json:"rows_done"`
	RowsTotal  int64  `json:"rows_total"`
	LagMS      int64  `json:"lag_ms"`
	Idle       bool   `json:"idle"`
	// Waiting says what the source waits for outside itself, and the fix (its checkpoint's gauge waiting_seconds,
	// label reason); empty when its last checkpoint carried none.
	Waiting        string `json:"waiting,omitempty"`
	WaitingSeconds int64  `json:"waiting_seconds,omitempty"`
	// Tables are the tables the source captures, from its checkpoints' captured_table gauges (the Postgres and
	// MySQL sources send them while streaming); the last list seen stays until a checkpoint carries a new one.
	Tables []CapturedTable `json:"tables,omitempty"`
}

// CapturedTable is one table a source captures, or released.
type CapturedTable struct {
	Name string `json:"name"`
	// Via is "name" (listed in the source's tables) or "pattern" (matched by a pattern there).
	Via string `json:"via,omitempty"`
	// Released: captured by a pattern and dropped at the source since; no longer captured (the destination's table
	// keeps its rows).
	Released bool `json:"released,omitempty"`
}

// capturedTables reads the captured_table gauges of a checkpoint, in their order; nil when it has none.
func capturedTables(ms []SourceMetric) []CapturedTable {
	var out []CapturedTable
	for _, m := range ms {
		if m.Name == "captured_table" && m.Labels["table"] != "" {
			out = append(out, CapturedTable{Name: m.Labels["table"], Via: m.Labels["via"], Released: m.Value == 0})
		}
	}
	return out
}

// publish sends a status snapshot to OnStatus, at most every StatusEvery unless forced. One held back is sent
// when the interval is up: the last change of a burst (the final apply before the pipeline goes idle) must
// reach the status, which otherwise showed entries behind and a source at 99% for as long as nothing else
// happened.
func (r *runner) publish(force bool) {
	if r.cfg.OnStatus == nil {
		return
	}
	r.mu.Lock()
	if r.statusFinal {
		r.mu.Unlock()
		return
	}
	if now := time.Now(); !force && now.Sub(r.lastStatus) < r.cfg.StatusEvery {
		if r.trailing == nil {
			r.trailing = time.AfterFunc(r.cfg.StatusEvery-now.Sub(r.lastStatus), r.publishHeldBack)
		}
		r.mu.Unlock()
		return
	}
	r.send()
}

func (r *runner) publishHeldBack() {
	r.mu.Lock()
	r.trailing = nil
	if r.statusFinal {
		r.mu.Unlock()
		return
	}
	r.trailingBusy.Add(1)
	r.mu.Unlock()
	defer r.trailingBusy.Done()
	r.publish(true)
}

// publishFinal sends the "stopped" status last: nothing is sent after it (the caller of Run may write its own
// state once Run returns).
func (r *runner) publishFinal() {
	r.mu.Lock()
	r.status.State = "stopped"
	r.mu.Unlock()
	r.endHeldBack()
	if r.cfg.OnStatus == nil {
		return
	}
	r.mu.Lock()
	r.send()
}

// endHeldBack cancels a held-back publish and waits for one already sending; none starts after it. Run calls it
// on every way out.
func (r *runner) endHeldBack() {
	r.mu.Lock()
	r.statusFinal = true
	if r.trailing != nil {
		r.trailing.Stop()
		r.trailing = nil
	}
	r.mu.Unlock()
	r.trailingBusy.Wait()
}

// send takes the snapshot under r.mu (held by the caller), releases it and calls OnStatus.
func (r *runner) send() {
	now := time.Now()
	r.lastStatus = now
	s := r.status
	s.StreamRows = maps.Clone(r.status.StreamRows) // OnStatus reads it after the lock is released
	s.Resnapshot = maps.Clone(r.status.Resnapshot)
	s.Updated = now
	s.WAL.LastCommitted = r.committedSeq
	s.WAL.ReclaimedThrough = r.reclaimed
	s.WAL.Entries = len(r.records)
	s.WAL.Bytes = 0
	for _, rec := range r.records {
		s.WAL.Bytes += rec.Size
	}
	s.WAL.UnappliedBytes = r.unappliedBytes()
	if s.Backpressure {
		s.State = "backpressure"
	}
	if s.DiskFull {
		s.State = "backpressure: disk full"
	}
	s.Destinations = nil
	for i, d := range r.cfg.Destinations {
		lim := d.Apply
		s.Destinations = append(s.Destinations, DestinationStatus{Name: d.Name, LastApplied: r.applied[i], Apply: &ApplyStatus{
			Coalesce: r.coalesce[i], MaxIntervalMS: lim.MaxInterval.Milliseconds(), MaxBytes: lim.MaxBytes, MaxEntries: lim.MaxEntries, FromPlugin: r.fromPlugin[i]}})
	}
	r.mu.Unlock()
	r.cfg.OnStatus(s)
}
