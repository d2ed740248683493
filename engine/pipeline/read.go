package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/skippr-dev/skippr/engine/failpoint"
	"github.com/skippr-dev/skippr/engine/resnapshot"
	"github.com/skippr-dev/skippr/engine/shutdown"
	"github.com/skippr-dev/skippr/engine/wal"
)

type readResult struct {
	m   Message
	err error
}

// group is a WAL entry in the making. Only frames up to the last checkpoint may be committed: what follows a
// checkpoint belongs to a transaction the source has not finished.
type group struct {
	frames      []wal.Frame
	committable int   // frames[:committable] are covered by checkpoint
	bytes       int64 // of frames[:committable]
	pending     int64 // of frames[committable:]
	checkpoint  *SourceCheckpoint
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
func (g *group) take() ([]wal.Frame, *SourceCheckpoint) {
	frames, cp := g.frames[:g.committable], g.checkpoint
	// idle stays: it describes the source after its last checkpoint, and any frame since has cleared it.
	*g = group{frames: append([]wal.Frame(nil), g.frames[g.committable:]...), pending: g.pending, since: time.Now(), idle: g.idle}
	return frames, cp
}

type commitResult struct {
	rec    wal.CommitRecord
	err    error
	frames []wal.Frame // what was committed, kept to retry the same entry after a full disk
	cp     *SourceCheckpoint
}

// stalledEntry is an entry the WAL had no room for. It is retried as it is — the same frames under the same
// checkpoint — so the source is acknowledged exactly as if the disk had never filled.
type stalledEntry struct {
	frames    []wal.Frame
	cp        *SourceCheckpoint
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
	rs, err := cfg.Source.Plugin.Read(readCtx, cfg.Name, cfg.Streams, from, streamsOf(included))
	if err != nil {
		return fmt.Errorf("pipeline %s: source %s: %w", cfg.Name, cfg.Source.Name, err)
	}
	if len(included) > 0 {
		r.log.Info("source read restarts with resnapshot requests", "streams", streamsOf(included))
	}
	l := newCommitLoop(ctx, r, included)
	defer l.close()
	go func() {
		for {
			m, err := rs.Next()
			select {
			case l.msgs <- readResult{m, err}:
			case <-readCtx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return l.run(ctx)
}

// commitLoop turns one Read of the source into WAL entries. Its run loop is the one place that decides what
// happens next; each of its cases calls one step, a method named for it (read, groupCommit, commitDone, …),
// and the state the steps share lives here rather than in closures. The steps that touch the outside world are
// where the crash points of engine/failpoint sit (package doc, Crash points).
type commitLoop struct {
	r   *runner
	cfg Config

	included []resnapshot.Request // the re-snapshot requests this Read carries, until an entry records them
	msgs     chan readResult      // the source's messages, from the goroutine reading its stream
	g        group                // the next entry, gathering
	inflight bool                 // a commit runs; its result comes on results
	results  chan commitResult
	stalled  *stalledEntry // set while the WAL's disk is full
	timer    *time.Timer   // MaxDelay of the oldest uncommitted frame
	retry    *time.Timer   // the next retry of a stalled entry
	poll     *time.Ticker  // `skippr resnapshot` requests (nil without Config.Resnapshots)
	reread   bool          // a new resnapshot request waits for this Read to end
	// A soft stop (the first SIGTERM) stops the reading and lets the commit in flight finish; frames read but
	// not committed are read again after the restart, since the source was never acknowledged for them.
	drain    <-chan struct{}
	draining bool
}

func newCommitLoop(ctx context.Context, r *runner, included []resnapshot.Request) *commitLoop {
	l := &commitLoop{
		r:        r,
		cfg:      r.cfg,
		included: included,
		msgs:     make(chan readResult, 16),
		results:  make(chan commitResult, 1),
		timer:    time.NewTimer(time.Hour),
		retry:    time.NewTimer(time.Hour),
		drain:    shutdown.Draining(ctx),
	}
	if r.cfg.Resnapshots != nil {
		l.poll = time.NewTicker(r.cfg.ResnapshotPoll)
	}
	return l
}

func (l *commitLoop) close() {
	l.timer.Stop()
	l.retry.Stop()
	if l.poll != nil {
		l.poll.Stop()
	}
}

// run is the loop: it starts a commit when one is due, ends the Read when its work is done, and otherwise
// waits for the next event and hands it to its step.
func (l *commitLoop) run(ctx context.Context) error {
	var pollC <-chan time.Time
	if l.poll != nil {
		pollC = l.poll.C
	}
	for {
		if err := l.r.waitBackpressure(ctx); err != nil {
			return err
		}
		if err := l.startDue(ctx); err != nil {
			return err
		}
		if done, err := l.finished(ctx); done {
			return err
		}
		progress, retryNow := l.stallWait()
		if retryNow {
			continue
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-l.drain:
			l.stop()
		case res := <-l.results:
			if err := l.commitDone(res); err != nil {
				return err
			}
		case <-pollC:
			l.pollResnapshots()
		case <-progress:
		case <-l.retry.C:
			if err := l.retryStalled(ctx); err != nil {
				return err
			}
		case <-l.timer.C:
			l.arm()
		case res := <-l.input():
			if err := l.read(res); err != nil {
				return err
			}
		}
	}
}

// startDue starts the commit that is due, if none is in flight: a stalled entry's retry, or the committable
// frames gathered. A soft stop with no commit in flight ends the Read instead.
func (l *commitLoop) startDue(ctx context.Context) error {
	switch {
	case l.inflight:
	case l.draining:
		return errStopped
	case l.stalled != nil:
		if l.stalled.retryNow {
			l.stalled.retryNow = false
			l.groupCommit(ctx, l.stalled.frames, l.stalled.cp)
		}
	case l.g.committable > 0:
		frames, cp := l.g.take()
		l.arm()
		l.groupCommit(ctx, frames, cp)
	}
	return nil
}

// finished reports whether this Read is over: a new resnapshot request waits and everything committable is
// committed (errReread), or a --once run found the source idle with everything committed (then it waits
// for the destinations).
func (l *commitLoop) finished(ctx context.Context) (bool, error) {
	quiet := !l.inflight && l.stalled == nil
	if l.reread && quiet && l.g.committable == 0 && !l.draining {
		return true, errReread
	}
	if l.cfg.Once && l.g.idle && quiet && len(l.g.frames) == 0 {
		return true, l.r.waitApplied(ctx, l.drain)
	}
	return false, nil
}

// input is the source's channel while the loop takes input, else nil. A full disk stops the reading, not the
// pipeline: apply and reclaim go on and free the space.
func (l *commitLoop) input() <-chan readResult {
	if l.draining || l.stalled != nil || (l.inflight && l.g.full(l.cfg)) || l.reread {
		return nil
	}
	return l.msgs
}

// stallWait is, for a stalled entry with no commit in flight, the channel that announces progress, and
// whether a reclaim since the stall freed space so the entry is due again at once.
func (l *commitLoop) stallWait() (progress chan struct{}, retryNow bool) {
	if l.stalled == nil || l.inflight {
		return nil, false
	}
	r := l.r
	r.mu.Lock()
	progress = r.changed
	l.stalled.retryNow = l.stalled.retryNow || r.reclaimed > l.stalled.reclaimed
	r.mu.Unlock()
	return progress, l.stalled.retryNow
}

// stop enters the soft stop.
func (l *commitLoop) stop() {
	l.drain, l.draining = nil, true
	l.r.stopping()
}

// read takes one message from the source stream into the gathering entry.
func (l *commitLoop) read(res readResult) error {
	cfg := l.cfg
	if res.err != nil {
		return fmt.Errorf("pipeline %s: source %s: %w", cfg.Name, cfg.Source.Name, res.err)
	}
	m := res.m
	switch {
	case m.Batch != nil:
		l.add(wal.Frame{Kind: wal.FrameBatch, Stream: m.Batch.Stream, Rows: m.Batch.Rows, Data: m.Batch.IPC})
		cfg.Observer.Read(m.Batch.Stream, m.Batch.Rows, int64(len(m.Batch.IPC)))
		l.g.idle = false
	case m.Schema != nil:
		if err := l.r.renameRefusal(m.Schema.Stream, m.Schema.ArrowSchema); err != nil {
			return err
		}
		l.add(wal.Frame{Kind: wal.FrameSchema, Stream: m.Schema.Stream, Data: m.Schema.ArrowSchema})
	case m.Truncate != "":
		l.add(wal.Frame{Kind: wal.FrameTruncate, Stream: m.Truncate})
		l.g.idle = false
	case m.Resnapshot != nil:
		mark, state := wal.ResnapshotBegin, "copying"
		if m.Resnapshot.End {
			mark, state = wal.ResnapshotEnd, "done"
		}
		l.add(wal.Frame{Kind: wal.FrameResnapshot, Stream: m.Resnapshot.Stream, Data: []byte{mark}})
		l.r.setResnapshot(m.Resnapshot.Stream, ResnapshotStatus{State: state})
		l.g.idle = false
	case m.Checkpoint != nil:
		g := &l.g
		g.committable, g.bytes, g.pending = len(g.frames), g.bytes+g.pending, 0
		g.checkpoint, g.idle = m.Checkpoint, m.Checkpoint.Idle
		l.r.resnapshotProgress(m.Checkpoint)
		l.r.sourceProgress(m.Checkpoint)
	}
	return nil
}

func (l *commitLoop) add(f wal.Frame) {
	g := &l.g
	first := len(g.frames) == 0
	if first {
		g.since = time.Now()
	}
	g.frames = append(g.frames, f)
	g.pending += int64(len(f.Data))
	if first {
		l.arm()
	}
}

// arm sets the timer to the delay bound of the oldest uncommitted frame, so the loop notices when a gathering
// behind a slow commit reaches MaxDelay.
func (l *commitLoop) arm() {
	if len(l.g.frames) == 0 {
		l.timer.Stop()
		return
	}
	l.timer.Reset(max(time.Until(l.g.since.Add(l.cfg.MaxDelay)), time.Millisecond))
}

// groupCommit starts the commit of frames as the next WAL entry, beside the reading; its result comes to
// commitDone.
func (l *commitLoop) groupCommit(ctx context.Context, frames []wal.Frame, cp *SourceCheckpoint) {
	l.inflight = true
	go func() {
		rec, err := l.r.commit(ctx, frames, cp)
		l.results <- commitResult{rec, err, frames, cp}
	}()
}

// commitDone takes the result of the commit in flight: a durable, acknowledged entry is handed to the apply
// loops; an entry the WAL had no room for stalls the reading until it can be retried as it is.
func (l *commitLoop) commitDone(res commitResult) error {
	r := l.r
	l.inflight = false
	if errors.Is(res.err, wal.ErrNoSpace) {
		if l.draining {
			return errStopped // the entry was not written and the source not acknowledged: nothing lost
		}
		if l.stalled == nil {
			r.diskFull(true, res.err)
		}
		r.mu.Lock()
		l.stalled = &stalledEntry{frames: res.frames, cp: res.cp, reclaimed: r.reclaimed}
		r.mu.Unlock()
		l.retry.Reset(diskFullRetry)
		return nil
	}
	if res.err != nil {
		return res.err
	}
	if l.stalled != nil {
		l.stalled = nil
		l.retry.Stop()
		r.diskFull(false, nil)
	}
	r.committed(res.rec)
	r.mu.Lock()
	r.lastCP = res.cp.Position
	r.mu.Unlock()
	if len(l.included) > 0 {
		r.resnapshotsTaken(l.included)
		l.included = nil
	}
	return nil
}

// retryStalled is the periodic retry of a stalled entry when no reclaim frees space: someone else may.
func (l *commitLoop) retryStalled(ctx context.Context) error {
	if l.stalled == nil {
		return nil
	}
	// A reclaim that failed for want of space itself is due again too.
	if err := l.r.reclaim(ctx); err != nil {
		return err
	}
	l.stalled.retryNow = true
	l.retry.Reset(diskFullRetry)
	return nil
}

// pollResnapshots notices a new `skippr resnapshot` request: the Read ends once what is committable is
// committed, and the next one carries it.
func (l *commitLoop) pollResnapshots() {
	if !l.reread && len(l.r.newResnapshots(l.included)) > 0 {
		l.reread = true
	}
}

// commit makes frames a WAL entry, then acknowledges the source. The order is the product: an Ack before the
// commit record exists could lose the batch in a crash.
func (r *runner) commit(ctx context.Context, frames []wal.Frame, cp *SourceCheckpoint) (wal.CommitRecord, error) {
	cfg := r.cfg
	start := time.Now()
	rec, err := cfg.Log.Commit(ctx, frames, cp.Position)
	if err != nil {
		return rec, fmt.Errorf("pipeline %s: %w", cfg.Name, err)
	}
	if err := failpoint.Hit(failpoint.PipelineAfterCommit); err != nil {
		return rec, fmt.Errorf("pipeline %s: WAL entry %d: %w", cfg.Name, rec.Seq, err)
	}
	if err := r.ack(ctx, rec, cp); err != nil {
		return rec, err
	}
	r.log.Debug("committed", "seq", rec.Seq, "bytes", rec.Size, "took", time.Since(start))
	cfg.Observer.Committed(entryOf(rec, frames), time.Since(start))
	return rec, nil
}

// ack tells the source that everything through cp is durable in entry rec, so it may release it.
func (r *runner) ack(ctx context.Context, rec wal.CommitRecord, cp *SourceCheckpoint) error {
	cfg := r.cfg
	if err := cfg.Source.Plugin.Ack(ctx, cp.Position); err != nil {
		return fmt.Errorf("pipeline %s: source %s: ack WAL entry %d: %w", cfg.Name, cfg.Source.Name, rec.Seq, err)
	}
	if err := failpoint.Hit(failpoint.PipelineAfterAck); err != nil {
		return fmt.Errorf("pipeline %s: source %s: WAL entry %d: %w", cfg.Name, cfg.Source.Name, rec.Seq, err)
	}
	return nil
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

func (r *runner) sourceProgress(cp *SourceCheckpoint) {
	r.mu.Lock()
	waited := r.status.Source.Waiting != ""
	tables := capturedTables(cp.Metrics)
	if tables == nil {
		tables = r.status.Source.Tables
	}
	r.status.Source = SourceStatus{Checkpoint: displayCheckpoint(cp.Position), RowsDone: cp.RowsDone, RowsTotal: cp.RowsTotal, LagMS: cp.Lag.Milliseconds(), Idle: cp.Idle, Tables: tables}
	for _, m := range cp.Metrics {
		if m.Name == "waiting_seconds" && m.Labels["reason"] != "" {
			r.status.Source.Waiting, r.status.Source.WaitingSeconds = m.Labels["reason"], int64(m.Value)
		}
	}
	waiting := r.status.Source.Waiting != ""
	r.mu.Unlock()
	r.cfg.Observer.Checkpoint(*cp)
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
