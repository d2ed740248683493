package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/skippr-dev/skippr/engine/resnapshot"
	"github.com/skippr-dev/skippr/engine/shutdown"
	"github.com/skippr-dev/skippr/engine/wal"
	"github.com/skippr-dev/skippr/plugin-sdk/client"
	pluginv1 "github.com/skippr-dev/skippr/plugin-sdk/proto/skippr/plugin/v1"
)

type readResult struct {
	m   client.Message
	err error
}

// group is a WAL entry in the making. Only frames up to the last checkpoint may be committed: what follows a
// checkpoint belongs to a transaction the source has not finished.
type group struct {
	frames      []wal.Frame
	committable int   // frames[:committable] are covered by checkpoint
	bytes       int64 // of frames[:committable]
	pending     int64 // of frames[committable:]
	checkpoint  *pluginv1.Checkpoint
	idle        bool      // the checkpoint said the source has nothing more right now
	since       time.Time // arrival of the oldest uncommitted frame
}

// full reports whether the gathering that waits for the commit in flight has reached its bounds: MaxBatchBytes
// of committable frames, or MaxDelay since its oldest frame. The reader then stops taking input until the
// commit returns, so an entry stays bounded however slow one commit is (an S3 PUT under load).
func (g *group) full(cfg Config) bool {
	return g.committable > 0 && (g.bytes >= cfg.MaxBatchBytes || time.Since(g.since) >= cfg.MaxDelay)
}

// take cuts the committable frames off the group.
func (g *group) take() ([]wal.Frame, *pluginv1.Checkpoint) {
	frames, cp := g.frames[:g.committable], g.checkpoint
	// idle stays: it describes the source after its last checkpoint, and any frame since has cleared it.
	*g = group{frames: append([]wal.Frame(nil), g.frames[g.committable:]...), pending: g.pending, since: time.Now(), idle: g.idle}
	return frames, cp
}

type commitResult struct {
	rec    wal.CommitRecord
	err    error
	frames []wal.Frame // what was committed, kept to retry the same entry after a full disk
	cp     *pluginv1.Checkpoint
}

// stalledEntry is an entry the WAL had no room for. It is retried as it is — the same frames under the same
// checkpoint — so the source is acknowledged exactly as if the disk had never filled.
type stalledEntry struct {
	frames    []wal.Frame
	cp        *pluginv1.Checkpoint
	reclaimed uint64 // reclaimed through this when the commit failed: a reclaim past it freed space
	retryNow  bool
}

// diskFullRetry is how often a stalled entry is retried when no reclaim frees space: someone else may.
const diskFullRetry = 2 * time.Second

// readLoop reads the source and cuts WAL entries. One commit runs at a time, beside the reading, and it starts
// as soon as something is committable and no commit is in flight (the classic group commit): whatever arrives
// while a commit runs is gathered into the next entry, so under load entries grow and commits stay few, and at
// moderate load a row waits for at most one commit before its own begins — never for a timer. Waiting MaxDelay
// for more rows instead cost 110–150 ms p50 at 5–20k rows/s (BENCHMARKS.md).
//
// A new `skippr resnapshot` request ends the Read once everything committable is committed, and the next Read
// starts from that last durable checkpoint with the request: what the source sent after it is read again.
func (r *runner) readLoop(ctx context.Context, from []byte) error {
	included := r.newResnapshots(nil)
	for {
		err := r.readOnce(ctx, from, included)
		if !errors.Is(err, errReread) {
			return err
		}
		r.mu.Lock()
		from = r.lastCP
		r.mu.Unlock()
		included = append(included[:0:0], r.newResnapshots(nil)...)
	}
}

// readOnce is one Read of the source, asking it to re-snapshot the streams of included.
func (r *runner) readOnce(ctx context.Context, from []byte, included []resnapshot.Request) error {
	cfg := r.cfg
	for _, q := range included {
		r.setResnapshot(q.Stream, ResnapshotStatus{State: "requested"})
	}
	readCtx, cancelRead := context.WithCancel(ctx)
	defer cancelRead()
	rs, err := cfg.Source.Plugin.ReadResnapshot(readCtx, cfg.Source.Settings, cfg.Streams, from, streamsOf(included))
	if err != nil {
		return fmt.Errorf("pipeline %s: source %s: %w", cfg.Name, cfg.Source.Name, err)
	}
	if len(included) > 0 {
		r.log.Info("source read restarts with resnapshot requests", "streams", streamsOf(included))
	}
	msgs := make(chan readResult, 16)
	go func() {
		for {
			m, err := rs.Next()
			select {
			case msgs <- readResult{m, err}:
			case <-readCtx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	var (
		g        group
		inflight bool
		stalled  *stalledEntry // set while the WAL's disk is full
		results  = make(chan commitResult, 1)
		timer    = time.NewTimer(time.Hour)
		retry    = time.NewTimer(time.Hour)
		poll     *time.Ticker
		reread   bool // a new resnapshot request waits for this Read to end
	)
	defer timer.Stop()
	defer retry.Stop()
	var pollC <-chan time.Time
	if cfg.Resnapshots != nil {
		poll = time.NewTicker(cfg.ResnapshotPoll)
		defer poll.Stop()
		pollC = poll.C
	}
	// A soft stop (the first SIGTERM) stops the reading and lets the commit in flight finish; frames read but
	// not committed are read again after the restart, since the source was never acknowledged for them.
	drain, draining := shutdown.Draining(ctx), false
	startCommit := func(frames []wal.Frame, cp *pluginv1.Checkpoint) {
		inflight = true
		go func() {
			rec, err := r.commit(ctx, frames, cp)
			results <- commitResult{rec, err, frames, cp}
		}()
	}
	for {
		if err := r.waitBackpressure(ctx); err != nil {
			return err
		}
		switch {
		case inflight:
		case draining:
			return errStopped
		case stalled != nil:
			if stalled.retryNow {
				stalled.retryNow = false
				startCommit(stalled.frames, stalled.cp)
			}
		case g.committable > 0:
			frames, cp := g.take()
			r.arm(&g, timer)
			startCommit(frames, cp)
		}
		if reread && !inflight && stalled == nil && g.committable == 0 && !draining {
			return errReread
		}
		if cfg.Once && g.idle && !inflight && stalled == nil && len(g.frames) == 0 {
			return r.waitApplied(ctx, drain)
		}
		// A full disk stops the reading, not the pipeline: apply and reclaim go on and free the space.
		input := msgs
		if draining || stalled != nil || (inflight && g.full(cfg)) || reread {
			input = nil
		}
		var progress chan struct{}
		if stalled != nil && !inflight {
			r.mu.Lock()
			progress = r.changed
			stalled.retryNow = stalled.retryNow || r.reclaimed > stalled.reclaimed
			r.mu.Unlock()
			if stalled.retryNow {
				continue
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-drain:
			drain, draining = nil, true
			r.stopping()
		case res := <-results:
			inflight = false
			if draining && errors.Is(res.err, wal.ErrNoSpace) {
				return errStopped // the entry was not written and the source not acknowledged: nothing lost
			}
			if errors.Is(res.err, wal.ErrNoSpace) {
				if stalled == nil {
					r.diskFull(true, res.err)
				}
				r.mu.Lock()
				stalled = &stalledEntry{frames: res.frames, cp: res.cp, reclaimed: r.reclaimed}
				r.mu.Unlock()
				retry.Reset(diskFullRetry)
				continue
			}
			if res.err != nil {
				return res.err
			}
			if stalled != nil {
				stalled = nil
				retry.Stop()
				r.diskFull(false, nil)
			}
			r.committed(res.rec)
			r.mu.Lock()
			r.lastCP = res.cp.Position
			r.mu.Unlock()
			if len(included) > 0 {
				r.resnapshotsTaken(included)
				included = nil
			}
		case <-pollC:
			if !reread && len(r.newResnapshots(included)) > 0 {
				reread = true
			}
		case <-progress:
		case <-retry.C:
			if stalled != nil {
				// A reclaim that failed for want of space itself is due again too.
				if err := r.reclaim(ctx); err != nil {
					return err
				}
				stalled.retryNow = true
				retry.Reset(diskFullRetry)
			}
		case <-timer.C:
			r.arm(&g, timer)
		case res := <-input:
			if res.err != nil {
				return fmt.Errorf("pipeline %s: source %s: %w", cfg.Name, cfg.Source.Name, res.err)
			}
			m := res.m
			switch {
			case m.Batch != nil:
				r.addFrame(&g, timer, wal.Frame{Kind: wal.FrameBatch, Stream: m.Batch.Stream, Rows: m.Batch.Rows, Data: m.Batch.IPC})
				cfg.Observer.Read(m.Batch.Stream, m.Batch.Rows, int64(len(m.Batch.IPC)))
				g.idle = false
			case m.Schema != nil:
				r.addFrame(&g, timer, wal.Frame{Kind: wal.FrameSchema, Stream: m.Schema.Name, Data: m.Schema.ArrowSchema})
			case m.Truncate != "":
				r.addFrame(&g, timer, wal.Frame{Kind: wal.FrameTruncate, Stream: m.Truncate})
				g.idle = false
			case m.Resnapshot != nil:
				mark, state := wal.ResnapshotBegin, "copying"
				if m.Resnapshot.End {
					mark, state = wal.ResnapshotEnd, "done"
				}
				r.addFrame(&g, timer, wal.Frame{Kind: wal.FrameResnapshot, Stream: m.Resnapshot.Stream, Data: []byte{mark}})
				r.setResnapshot(m.Resnapshot.Stream, ResnapshotStatus{State: state})
				g.idle = false
			case m.Checkpoint != nil:
				g.committable, g.bytes, g.pending = len(g.frames), g.bytes+g.pending, 0
				g.checkpoint, g.idle = m.Checkpoint, m.Checkpoint.Idle
				r.resnapshotProgress(m.Checkpoint)
				r.sourceProgress(m.Checkpoint)
			}
		}
	}
}

func (r *runner) addFrame(g *group, timer *time.Timer, f wal.Frame) {
	first := len(g.frames) == 0
	if first {
		g.since = time.Now()
	}
	g.frames = append(g.frames, f)
	g.pending += int64(len(f.Data))
	if first {
		r.arm(g, timer)
	}
}

// arm sets the timer to the delay bound of the oldest uncommitted frame, so the loop notices when a gathering
// behind a slow commit reaches MaxDelay.
func (r *runner) arm(g *group, timer *time.Timer) {
	if len(g.frames) == 0 {
		timer.Stop()
		return
	}
	timer.Reset(max(time.Until(g.since.Add(r.cfg.MaxDelay)), time.Millisecond))
}

// commit makes frames a WAL entry, then acknowledges the source. The order is the product: an Ack before the
// commit record exists could lose the batch in a crash.
func (r *runner) commit(ctx context.Context, frames []wal.Frame, cp *pluginv1.Checkpoint) (wal.CommitRecord, error) {
	cfg := r.cfg
	start := time.Now()
	rec, err := cfg.Log.Commit(ctx, frames, cp.Position)
	if err != nil {
		return rec, fmt.Errorf("pipeline %s: %w", cfg.Name, err)
	}
	if err := cfg.Source.Plugin.Ack(ctx, cp.Position); err != nil {
		return rec, fmt.Errorf("pipeline %s: source %s: ack WAL entry %d: %w", cfg.Name, cfg.Source.Name, rec.Seq, err)
	}
	r.log.Debug("committed", "seq", rec.Seq, "bytes", rec.Size, "took", time.Since(start))
	cfg.Observer.Committed(entryOf(rec, frames), time.Since(start))
	return rec, nil
}

// committed records a durable entry and wakes the apply loops.
func (r *runner) committed(rec wal.CommitRecord) {
	var rows int64
	for _, n := range rec.Rows {
		rows += n
	}
	r.mu.Lock()
	r.committedSeq = rec.Seq
	r.keep(rec)
	r.status.RowsCommitted += rows
	r.countStreams(rec.Rows)
	r.notify()
	r.mu.Unlock()
	r.publish(false)
}

// diskFull enters or leaves the disk-full state: logged once per episode, shown in status.
func (r *runner) diskFull(on bool, err error) {
	r.mu.Lock()
	r.status.DiskFull = on
	r.mu.Unlock()
	if on {
		r.log.Warn("disk full: no room for the next WAL entry; source reads paused while apply and reclaim go on; the entry is retried as space frees (free space under the WAL, or lower max_unapplied_bytes)", "wal", r.cfg.Log.URL(), "err", err)
	} else {
		r.log.Info("disk full: space is back; the WAL entry is committed and source reads resume", "wal", r.cfg.Log.URL())
	}
	r.publish(true)
}

// waitBackpressure blocks while the WAL holds more unapplied bytes than allowed.
func (r *runner) waitBackpressure(ctx context.Context) error {
	for {
		r.mu.Lock()
		over := !r.cfg.ApplyPaused && r.unappliedBytes() > r.cfg.MaxUnappliedBytes
		ch := r.changed
		if over != r.status.Backpressure {
			r.status.Backpressure = over
			if over {
				r.log.Warn("backpressure: WAL holds too many unapplied bytes; source reads paused until apply catches up", "limit", r.cfg.MaxUnappliedBytes)
			}
		}
		r.mu.Unlock()
		if !over {
			return nil
		}
		r.publish(true)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

// stopping enters the soft stop.
func (r *runner) stopping() {
	r.mu.Lock()
	r.status.State = "stopping"
	r.mu.Unlock()
	r.log.Info("stop requested: source reads stop; the WAL commit and destination applies in flight finish first (signal again to stop at once)")
	r.publish(true)
}

// waitApplied returns once every destination has applied, and the log reclaimed, everything committed, or
// with errStopped when a soft stop begins.
func (r *runner) waitApplied(ctx context.Context, drain <-chan struct{}) error {
	r.mu.Lock()
	// Nothing more is coming: a destination waiting out its max_interval would only delay the end.
	r.flush = true
	r.notify()
	r.mu.Unlock()
	for {
		r.mu.Lock()
		done := r.cfg.ApplyPaused || len(r.applied) == 0 || r.reclaimed >= r.committedSeq
		ch := r.changed
		r.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-drain:
			r.stopping()
			return errStopped
		case <-ch:
		}
	}
}

func (r *runner) sourceProgress(cp *pluginv1.Checkpoint) {
	r.mu.Lock()
	waited := r.status.Source.Waiting != ""
	r.status.Source = SourceStatus{Checkpoint: displayCheckpoint(cp.Position), RowsDone: cp.RowsDone, RowsTotal: cp.RowsTotal, LagMS: cp.LagMs, Idle: cp.Idle}
	for _, m := range cp.Metrics {
		if m.Name == "waiting_seconds" && m.Labels["reason"] != "" {
			r.status.Source.Waiting, r.status.Source.WaitingSeconds = m.Labels["reason"], int64(m.Value)
		}
	}
	waiting := r.status.Source.Waiting != ""
	r.mu.Unlock()
	r.cfg.Observer.Checkpoint(sourceCheckpoint(cp))
	// A wait that begins or ends is news a person looks for: StatusEvery does not hold it back.
	r.publish(waiting || waited)
}

// displayCheckpoint keeps status readable: a checkpoint is opaque bytes, sometimes large (a source may keep its
// schemas in it).
func displayCheckpoint(b []byte) string {
	const limit = 64
	if len(b) <= limit {
		return string(b)
	}
	return fmt.Sprintf("%s… (%d bytes)", b[:limit], len(b))
}
