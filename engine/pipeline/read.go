package pipeline

import (
	"context"
	"fmt"
	"time"

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

// due reports whether the committable part should become a WAL entry now.
func (g *group) due(cfg Config) bool {
	return g.committable > 0 && (g.idle || g.bytes >= cfg.MaxBatchBytes || time.Since(g.since) >= cfg.MaxDelay)
}

// take cuts the committable frames off the group.
func (g *group) take() ([]wal.Frame, *pluginv1.Checkpoint) {
	frames, cp := g.frames[:g.committable], g.checkpoint
	// idle stays: it describes the source after its last checkpoint, and any frame since has cleared it.
	*g = group{frames: append([]wal.Frame(nil), g.frames[g.committable:]...), pending: g.pending, since: time.Now(), idle: g.idle}
	return frames, cp
}

type commitResult struct {
	rec wal.CommitRecord
	err error
}

// readLoop reads the source and cuts WAL entries. One commit runs at a time, beside the reading: whatever
// arrives while it runs goes into the next entry, so under load entries grow and commits stay few (group
// commit), and a lone request is committed at once.
func (r *runner) readLoop(ctx context.Context, from []byte) error {
	cfg := r.cfg
	rs, err := cfg.Source.Plugin.Read(ctx, cfg.Source.Settings, cfg.Streams, from)
	if err != nil {
		return fmt.Errorf("pipeline %s: source %s: %w", cfg.Name, cfg.Source.Name, err)
	}
	msgs := make(chan readResult, 16)
	go func() {
		for {
			m, err := rs.Next()
			select {
			case msgs <- readResult{m, err}:
			case <-ctx.Done():
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
		results  = make(chan commitResult, 1)
		timer    = time.NewTimer(time.Hour)
	)
	defer timer.Stop()
	startCommit := func() {
		frames, cp := g.take()
		r.arm(&g, timer)
		inflight = true
		go func() {
			rec, err := r.commit(ctx, frames, cp)
			results <- commitResult{rec, err}
		}()
	}
	for {
		if err := r.waitBackpressure(ctx); err != nil {
			return err
		}
		if !inflight && g.due(cfg) {
			startCommit()
		}
		if cfg.Once && g.idle && !inflight && len(g.frames) == 0 {
			return r.waitApplied(ctx)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case res := <-results:
			inflight = false
			if res.err != nil {
				return res.err
			}
			r.committed(res.rec)
		case <-timer.C:
			r.arm(&g, timer)
		case res := <-msgs:
			if res.err != nil {
				return fmt.Errorf("pipeline %s: source %s: %w", cfg.Name, cfg.Source.Name, res.err)
			}
			m := res.m
			switch {
			case m.Batch != nil:
				r.addFrame(&g, timer, wal.Frame{Kind: wal.FrameBatch, Stream: m.Batch.Stream, Rows: m.Batch.Rows, Data: m.Batch.IPC})
				g.idle = false
			case m.Schema != nil:
				r.addFrame(&g, timer, wal.Frame{Kind: wal.FrameSchema, Stream: m.Schema.Name, Data: m.Schema.ArrowSchema})
			case m.Checkpoint != nil:
				g.committable, g.bytes, g.pending = len(g.frames), g.bytes+g.pending, 0
				g.checkpoint, g.idle = m.Checkpoint, m.Checkpoint.Idle
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

// arm sets the timer to the delay bound of the oldest uncommitted frame, so a quiet source still gets its
// last checkpoint committed on time.
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
	r.sizes[rec.Seq] = rec.Size
	r.status.RowsCommitted += rows
	r.countStreams(rec.Rows)
	r.notify()
	r.mu.Unlock()
	r.publish(false)
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

// waitApplied returns once every destination has applied, and the log reclaimed, everything committed.
func (r *runner) waitApplied(ctx context.Context) error {
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
		case <-ch:
		}
	}
}

func (r *runner) sourceProgress(cp *pluginv1.Checkpoint) {
	r.mu.Lock()
	r.status.Source = SourceStatus{Checkpoint: displayCheckpoint(cp.Position), RowsDone: cp.RowsDone, RowsTotal: cp.RowsTotal, LagMS: cp.LagMs, Idle: cp.Idle}
	r.mu.Unlock()
	r.publish(false)
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
