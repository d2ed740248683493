package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/skippr-dev/skippr/engine/failpoint"
	"github.com/skippr-dev/skippr/engine/wal"
)

// applyLoop hands committed entries to destination i in sequence order: one entry per apply, or, when the
// destination coalesces, every entry it lacks up to its ApplyLimits as one apply (a range).
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
	var began time.Time // when the last apply began, for max_interval
	for {
		applied, ok := r.waitDue(ctx, i, began)
		if !ok {
			return nil
		}
		// The commit records come from the runner, which holds every live one: listing and reading them
		// again from the log (on S3, a LIST and a GET each) would only find the same.
		entries, err := r.pending(applied)
		if err != nil {
			return fmt.Errorf("pipeline %s: destination %s: %w", cfg.Name, d.Name, err)
		}
		for len(entries) > 0 {
			select {
			case <-r.stopApply:
				return nil
			default:
			}
			n := 1
			if r.coalesce[i] {
				n = takeRange(entries, d.Apply)
			}
			rng := entries[:n]
			entries = entries[n:]
			began = time.Now()
			if err := r.apply(ctx, i, applied, rng); err != nil {
				return err
			}
			applied = rng[len(rng)-1].Seq
			if r.coalesce[i] {
				// Entries committed during the apply join the next range: list again rather than send the
				// rest of this listing in pieces.
				break
			}
		}
	}
}

// apply is one apply of the range rng, which must follow applied, to destination i, and the record of its
// result: the step between the WAL and a destination.
func (r *runner) apply(ctx context.Context, i int, applied uint64, rng []wal.CommitRecord) error {
	cfg := r.cfg
	d := cfg.Destinations[i]
	for k, e := range rng {
		if e.Seq != applied+1+uint64(k) {
			return fmt.Errorf("pipeline %s: destination %s: WAL entry %d follows %d: entries are missing: %w", cfg.Name, d.Name, e.Seq, applied+uint64(k), wal.ErrMissing)
		}
	}
	began := time.Now()
	resp, sum, err := r.applyRange(ctx, i, rng)
	if err != nil {
		return err
	}
	// The destination holds the range; until advance, the engine does not know it (a restart asks LastApplied).
	if err := failpoint.Hit(failpoint.PipelineAfterApply); err != nil {
		return fmt.Errorf("pipeline %s: destination %s: WAL entries %d..%d: %w", cfg.Name, d.Name, sum.First, sum.Seq, err)
	}
	cfg.Observer.Applied(d.Name, sum, resp.Skipped, time.Since(began))
	r.log.Debug("applied", "destination", d.Name, "first", sum.First, "seq", sum.Seq, "rows", resp.Rows, "skipped", resp.Skipped)
	return r.advance(ctx, i, sum.Seq, resp.Rows)
}

// takeRange is how many of entries (at least one) the next coalesced apply takes under lim.
func takeRange(entries []wal.CommitRecord, lim ApplyLimits) int {
	n, bytes := 1, entries[0].Size
	for n < len(entries) && (lim.MaxEntries <= 0 || n < lim.MaxEntries) && bytes+entries[n].Size <= lim.MaxBytes {
		bytes += entries[n].Size
		n++
	}
	return n
}

// waitDue waits until destination i has an entry to apply and, when it coalesces with a max_interval, until
// that interval since the apply that began at began ran out, or the waiting entries fill a limit, or holding
// them back would stall the source or a finishing --once run. It returns what i applied so far, or ok false
// at a stop.
func (r *runner) waitDue(ctx context.Context, i int, began time.Time) (applied uint64, ok bool) {
	lim := r.cfg.Destinations[i].Apply
	for {
		r.mu.Lock()
		applied, committed, ch := r.applied[i], r.committedSeq, r.changed
		var wait time.Duration
		if applied < committed && r.coalesce[i] && lim.MaxInterval > 0 && !r.flush && r.unappliedBytes() <= r.cfg.MaxUnappliedBytes {
			var bytes int64
			for seq := applied + 1; seq <= committed; seq++ {
				bytes += r.records[seq].Size
			}
			full := bytes >= lim.MaxBytes || (lim.MaxEntries > 0 && committed-applied >= uint64(lim.MaxEntries))
			if !full {
				wait = time.Until(began.Add(lim.MaxInterval))
			}
		}
		r.mu.Unlock()
		if applied < committed && wait <= 0 {
			return applied, true
		}
		var due <-chan time.Time
		t := time.NewTimer(wait)
		if wait > 0 {
			due = t.C
		}
		select {
		case <-ctx.Done():
			ok = false
		case <-r.stopApply:
			ok = false
		case <-ch:
			ok = true
		case <-due:
			ok = true
		}
		t.Stop()
		if !ok {
			return 0, false
		}
	}
}

// applyRange applies rng to d as one call, streaming: it reads one segment, sends its items, then reads the
// next, so memory holds one segment however long the range. sum describes the range for the observer.
func (r *runner) applyRange(ctx context.Context, i int, rng []wal.CommitRecord) (ApplyResult, Entry, error) {
	cfg := r.cfg
	d := cfg.Destinations[i]
	first, last := rng[0], rng[len(rng)-1]
	sum := Entry{First: first.Seq, Seq: last.Seq, Committed: last.Time, Streams: map[string]StreamFigures{}}
	read := func(ctx context.Context, e wal.CommitRecord) ([]wal.Frame, error) {
		frames, err := r.segments.read(ctx, e, r.othersNeeding(i, e.Seq))
		if err != nil {
			// A corrupt or missing segment stops apply: skipping it would lose data silently.
			return nil, fmt.Errorf("pipeline %s: destination %s: apply stopped: %w", cfg.Name, d.Name, &EntryError{Seq: e.Seq, Segment: e.Segment, Err: err})
		}
		sum.add(e, frames)
		return frames, nil
	}
	// The first segment is read before the call, so that the usual failure opens no apply at all.
	frames, err := read(ctx, first)
	if err != nil {
		return ApplyResult{}, sum, err
	}
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	var readErr error
	items := func(yield func(ApplyItem) bool) {
		for k, e := range rng {
			if k > 0 {
				if frames, readErr = read(actx, e); readErr != nil {
					// Ending the items would commit the range without this entry (and with its sequence
					// number as the fence): cancelling aborts the apply instead.
					cancel()
					return
				}
			}
			if len(rng) > 1 && !yield(ApplyItem{Entry: e.Seq}) {
				return
			}
			for _, it := range items(frames) {
				if !yield(it) {
					return
				}
			}
			frames = nil
		}
		// Every item is sent and the destination not yet told the range ended, so it has not committed it.
		if err := failpoint.Hit(failpoint.PipelineApplySent); err != nil {
			readErr = fmt.Errorf("pipeline %s: destination %s: WAL entries %d..%d: %w", cfg.Name, d.Name, first.Seq, last.Seq, err)
			cancel()
		}
	}
	resp, err := d.Plugin.ApplyRange(actx, cfg.Name, first.Seq, last.Seq, items)
	if readErr != nil {
		return ApplyResult{}, sum, readErr
	}
	if err != nil {
		return ApplyResult{}, sum, fmt.Errorf("pipeline %s: destination %s: %w", cfg.Name, d.Name, err)
	}
	return resp, sum, nil
}

func items(frames []wal.Frame) []ApplyItem {
	out := make([]ApplyItem, 0, len(frames))
	for _, f := range frames {
		switch f.Kind {
		case wal.FrameBatch:
			out = append(out, ApplyItem{Batch: &Batch{Stream: f.Stream, Rows: f.Rows, IPC: f.Data}})
		case wal.FrameSchema:
			out = append(out, ApplyItem{Schema: &Schema{Stream: f.Stream, ArrowSchema: f.Data}})
		case wal.FrameTruncate:
			out = append(out, ApplyItem{Truncate: f.Stream})
		case wal.FrameResnapshot:
			out = append(out, ApplyItem{Resnapshot: &ResnapshotMark{Stream: f.Stream, End: f.Data[0] == wal.ResnapshotEnd}})
		}
	}
	return out
}

// advance records destination i's progress and has the reclaimer delete what every destination applied.
func (r *runner) advance(_ context.Context, i int, seq uint64, rows int64) error {
	r.mu.Lock()
	r.applied[i] = seq
	r.status.RowsApplied += rows
	r.notify()
	r.mu.Unlock()
	select {
	case r.reclaimDue <- struct{}{}:
	default: // one is due already; it will see this progress too
	}
	r.publish(false)
	return nil
}

// reclaimLoop reclaims whenever an apply moved a destination, off the apply loops: deleting segments (DELETEs
// on S3) then delays neither the next apply nor, while it waits for the log, the loop that applied. Each pass
// reclaims through what every destination applied at that moment, so progress made during one is taken by
// the next.
func (r *runner) reclaimLoop(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.reclaimDue:
		}
		if err := r.reclaim(ctx); err != nil {
			if ctx.Err() != nil {
				return nil // cut off by the end of the run: the next start reclaims
			}
			return err
		}
		r.publish(false)
	}
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
	for s := range r.records {
		if s <= lo {
			delete(r.records, s)
		}
	}
	r.notify()
	r.mu.Unlock()
	r.segments.drop(lo)
	return nil
}

// pending returns the commit records after applied, through the last committed entry.
func (r *runner) pending(applied uint64) ([]wal.CommitRecord, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]wal.CommitRecord, 0, r.committedSeq-min(applied, r.committedSeq))
	for seq := applied + 1; seq <= r.committedSeq; seq++ {
		rec, ok := r.records[seq]
		if !ok {
			return nil, fmt.Errorf("WAL entry %d is not among the live entries %s holds (reclaimed through %d): %w", seq, r.cfg.Log.URL(), r.reclaimed, wal.ErrMissing)
		}
		out = append(out, rec)
	}
	return out, nil
}

// othersNeeding is how many destinations other than i have not applied seq yet: the readers a shared segment
// is kept for.
func (r *runner) othersNeeding(i int, seq uint64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for j, a := range r.applied {
		if j != i && a < seq {
			n++
		}
	}
	return n
}
