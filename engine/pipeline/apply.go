package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/skippr-dev/skippr/engine/wal"
	"github.com/skippr-dev/skippr/plugin-sdk/client"
	pluginv1 "github.com/skippr-dev/skippr/plugin-sdk/proto/skippr/plugin/v1"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
)

// applyLoop hands committed entries to destination i in sequence order, one Apply per entry.
func (r *runner) applyLoop(ctx context.Context, i int) error {
	cfg := r.cfg
	d := cfg.Destinations[i]
	// A crash between the last destination's commit and the reclaim after it leaves entries that every
	// destination applied still in the log. No apply would follow to reclaim them, and `sync --once` would
	// wait for that forever.
	r.mu.Lock()
	resumed := r.applied[i]
	r.mu.Unlock()
	if err := r.advance(ctx, i, resumed, 0); err != nil {
		return err
	}
	for {
		r.mu.Lock()
		applied, committed, ch := r.applied[i], r.committedSeq, r.changed
		r.mu.Unlock()
		if applied >= committed {
			select {
			case <-ctx.Done():
				return nil
			case <-r.stopApply:
				return nil
			case <-ch:
				continue
			}
		}
		entries, err := cfg.Log.Entries(ctx, applied)
		if err != nil {
			return fmt.Errorf("pipeline %s: destination %s: %w", cfg.Name, d.Name, err)
		}
		for _, e := range entries {
			select {
			case <-r.stopApply:
				return nil
			default:
			}
			if e.Seq != applied+1 {
				return fmt.Errorf("pipeline %s: destination %s: WAL entry %d follows %d: entries are missing: %w", cfg.Name, d.Name, e.Seq, applied, wal.ErrMissing)
			}
			frames, err := cfg.Log.ReadSegment(ctx, e)
			if err != nil {
				// A corrupt or missing segment stops apply: skipping it would lose data silently.
				return fmt.Errorf("pipeline %s: destination %s: apply stopped: %w", cfg.Name, d.Name, &EntryError{Seq: e.Seq, Segment: e.Segment, Err: err})
			}
			start := time.Now()
			resp, err := d.Plugin.Apply(ctx, d.Settings, cfg.Name, e.Seq, items(frames))
			if err != nil {
				return fmt.Errorf("pipeline %s: destination %s: %w", cfg.Name, d.Name, err)
			}
			cfg.Observer.Applied(d.Name, entryOf(e, frames), resp.Skipped, time.Since(start))
			applied = e.Seq
			r.log.Debug("applied", "destination", d.Name, "seq", e.Seq, "rows", resp.Rows, "skipped", resp.Skipped)
			if err := r.advance(ctx, i, e.Seq, resp.Rows); err != nil {
				return err
			}
		}
	}
}

func items(frames []wal.Frame) []client.ApplyItem {
	out := make([]client.ApplyItem, 0, len(frames))
	for _, f := range frames {
		switch f.Kind {
		case wal.FrameBatch:
			out = append(out, client.ApplyItem{Batch: &protocol.Batch{Stream: f.Stream, Rows: f.Rows, IPC: f.Data}})
		case wal.FrameSchema:
			out = append(out, client.ApplyItem{Schema: &pluginv1.Stream{Name: f.Stream, ArrowSchema: f.Data}})
		case wal.FrameTruncate:
			out = append(out, client.ApplyItem{Truncate: f.Stream})
		case wal.FrameResnapshot:
			out = append(out, client.ApplyItem{Resnapshot: &pluginv1.ResnapshotMark{Stream: f.Stream, End: f.Data[0] == wal.ResnapshotEnd}})
		}
	}
	return out
}

// advance records destination i's progress and reclaims what every destination has applied.
func (r *runner) advance(ctx context.Context, i int, seq uint64, rows int64) error {
	r.mu.Lock()
	r.applied[i] = seq
	r.status.RowsApplied += rows
	r.notify()
	r.mu.Unlock()
	if err := r.reclaim(ctx); err != nil {
		return err
	}
	r.publish(false)
	return nil
}

// EntryError names the WAL entry and segment an apply stopped at, so `status` can point at them.
type EntryError struct {
	Seq     uint64
	Segment string
	Err     error
}

func (e *EntryError) Error() string { return e.Err.Error() }
func (e *EntryError) Unwrap() error { return e.Err }

// reclaim deletes the entries every destination has applied.
func (r *runner) reclaim(ctx context.Context) error {
	r.mu.Lock()
	lo := r.minApplied()
	due := lo > r.reclaimed
	r.mu.Unlock()
	if !due {
		return nil
	}
	// Reclaim is idempotent and safe to race with a concurrent one: both delete only what all applied.
	if err := r.cfg.Log.Reclaim(ctx, lo); err != nil {
		if errors.Is(err, wal.ErrNoSpace) {
			// Its small checkpoint record found no room either; the next apply, or the stalled reader's
			// retry, tries again. Stopping here would stop the one thing that frees space.
			r.log.Warn("reclaim: no room for the checkpoint record; retrying later", "through", lo, "err", err)
			return nil
		}
		return fmt.Errorf("pipeline %s: reclaim through %d: %w", r.cfg.Name, lo, err)
	}
	r.mu.Lock()
	if lo > r.reclaimed {
		r.reclaimed = lo
	}
	for s := range r.sizes {
		if s <= lo {
			delete(r.sizes, s)
		}
	}
	r.notify()
	r.mu.Unlock()
	return nil
}
