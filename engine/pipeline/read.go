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
	since       time.Time // arrival of the oldest uncommitted frame
}

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
	var g group
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	idle := false
	for {
		if err := r.waitBackpressure(ctx); err != nil {
			return err
		}
		if idle && cfg.Once && g.committable == 0 && len(g.frames) == 0 {
			return r.waitApplied(ctx)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
			if g.committable > 0 && time.Since(g.since) >= cfg.MaxDelay {
				if err := r.commit(ctx, &g); err != nil {
					return err
				}
			}
			r.arm(&g, timer)
		case res := <-msgs:
			if res.err != nil {
				return fmt.Errorf("pipeline %s: source %s: %w", cfg.Name, cfg.Source.Name, res.err)
			}
			m := res.m
			switch {
			case m.Batch != nil:
				r.addFrame(&g, timer, wal.Frame{Kind: wal.FrameBatch, Stream: m.Batch.Stream, Rows: m.Batch.Rows, Data: m.Batch.IPC})
				idle = false
			case m.Schema != nil:
				r.addFrame(&g, timer, wal.Frame{Kind: wal.FrameSchema, Stream: m.Schema.Name, Data: m.Schema.ArrowSchema})
			case m.Checkpoint != nil:
				g.committable, g.bytes, g.pending = len(g.frames), g.bytes+g.pending, 0
				g.checkpoint = m.Checkpoint
				idle = m.Checkpoint.Idle
				r.sourceProgress(m.Checkpoint)
				if g.committable > 0 && (g.bytes >= cfg.MaxBatchBytes || time.Since(g.since) >= cfg.MaxDelay || idle) {
					if err := r.commit(ctx, &g); err != nil {
						return err
					}
					r.arm(&g, timer)
				}
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

// commit makes frames[:committable] a WAL entry, then acknowledges the source. The order is the product: an
// Ack before the commit record exists could lose the batch in a crash.
func (r *runner) commit(ctx context.Context, g *group) error {
	cfg := r.cfg
	start := time.Now()
	rec, err := cfg.Log.Commit(ctx, g.frames[:g.committable], g.checkpoint.Position)
	if err != nil {
		return fmt.Errorf("pipeline %s: %w", cfg.Name, err)
	}
	if err := cfg.Source.Plugin.Ack(ctx, g.checkpoint.Position); err != nil {
		return fmt.Errorf("pipeline %s: source %s: ack WAL entry %d: %w", cfg.Name, cfg.Source.Name, rec.Seq, err)
	}
	var rows int64
	for _, n := range rec.Rows {
		rows += n
	}
	r.log.Debug("committed", "seq", rec.Seq, "rows", rows, "bytes", rec.Size, "took", time.Since(start))
	rest := append([]wal.Frame(nil), g.frames[g.committable:]...)
	*g = group{frames: rest, pending: g.pending, since: time.Now()}
	r.mu.Lock()
	r.committed = rec.Seq
	r.sizes[rec.Seq] = rec.Size
	r.status.RowsCommitted += rows
	r.notify()
	r.mu.Unlock()
	r.publish(false)
	return nil
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
		done := r.cfg.ApplyPaused || len(r.applied) == 0 || r.reclaimed >= r.committed
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
