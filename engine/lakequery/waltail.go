package lakequery

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/skippr-dev/skippr/engine/failpoint"
	"github.com/skippr-dev/skippr/engine/wal"
)

// walTail follows one pipeline's WAL across statements (`skippr serve` runs many with one Querier): each
// statement lists only the commit records after the newest one it has seen and reads only the segments it
// has not decoded yet; the decoded frames of up to limit bytes of entries are kept (the rest are read again
// per statement), and entries reclaimed since are dropped.
//
// Each statement still sees exactly the entries committed and not reclaimed when it started: the Head read
// at its start bounds what it takes, and the frames it holds are its own for its whole run, so a reclaim
// while it runs cannot take rows from it (the lake, planned after, holds them too, and the table's fence
// drops the copies). A WAL made again (its newest seq went backwards, or the newest entry seen has another
// commit record) starts the cache over.
type walTail struct {
	limit int64 // bytes of decoded frames kept; 0: none

	mu      sync.Mutex
	bytes   int64
	last    uint64 // the newest seq listed
	entries map[uint64]*tailEntry
}

type tailEntry struct {
	rec    wal.CommitRecord
	frames []wal.Frame // nil: not kept (over the limit); read again
	size   int64
}

func newWALTail(limit int64) *walTail {
	return &walTail{limit: limit, entries: map[uint64]*tailEntry{}}
}

// tailAttempts bounds the retries when a reclaim runs between the Head and the listing.
const tailAttempts = 3

// read returns the committed, unreclaimed entries of l as of now.
func (t *walTail) read(ctx context.Context, l walReader, pipeline string) (walEntries, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var (
		h    wal.Head
		recs []wal.CommitRecord
		err  error
	)
	for attempt := 1; ; attempt++ {
		if h, err = l.Head(ctx); err != nil {
			return walEntries{}, fmt.Errorf("pipeline %s: %w", pipeline, err)
		}
		if h.LastSeq < t.last { // the log was made again: nothing cached is it
			t.reset()
		}
		for seq, e := range t.entries {
			if seq <= h.ReclaimedThrough {
				t.bytes -= e.size
				delete(t.entries, seq)
			}
		}
		// The newest entry seen is listed again: a log made again since, whose seqs came back to it, has
		// another record there, and nothing cached is it.
		newest, known := t.entries[t.last]
		after := max(h.ReclaimedThrough, t.last)
		if known {
			after--
		}
		recs, err = l.Entries(ctx, after)
		if errors.Is(err, wal.ErrReclaimed) && attempt < tailAttempts {
			continue // reclaimed between Head and Entries: look again
		}
		if errors.Is(err, wal.ErrReclaimed) {
			return walEntries{}, fmt.Errorf("pipeline %s: %w: %w", pipeline, err, ErrRetry)
		}
		if err != nil {
			return walEntries{}, fmt.Errorf("pipeline %s: %w", pipeline, err)
		}
		if known {
			if len(recs) == 0 || !sameEntry(recs[0], newest.rec) {
				t.reset()
				continue
			}
			recs = recs[1:]
		}
		break
	}
	for _, rec := range recs {
		t.entries[rec.Seq] = &tailEntry{rec: rec}
		t.last = max(t.last, rec.Seq)
	}
	t.last = max(t.last, h.ReclaimedThrough)
	seqs := make([]uint64, 0, len(t.entries))
	for seq := range t.entries {
		seqs = append(seqs, seq)
	}
	slices.Sort(seqs)
	// The entries are listed and their segments not read yet: a sync that reclaims them now deletes them
	// under this statement (the read below tells that apart from a lost segment).
	if err := failpoint.Hit(failpoint.LakequeryAfterList); err != nil {
		return walEntries{}, fmt.Errorf("pipeline %s: %w", pipeline, err)
	}
	var out walEntries
	seen := map[string]bool{}
	for _, seq := range seqs {
		e := t.entries[seq]
		frames := e.frames
		if frames == nil {
			frames, err = l.ReadSegment(ctx, e.rec)
			if err != nil {
				if h2, herr := l.Head(ctx); herr == nil && h2.ReclaimedThrough >= seq {
					continue // applied by every destination: the plan (made after) holds it
				}
				return walEntries{}, fmt.Errorf("pipeline %s: %w", pipeline, err)
			}
			var size int64
			for _, f := range frames {
				size += int64(len(f.Data))
			}
			if t.bytes+size <= t.limit {
				e.frames, e.size = frames, size
				t.bytes += size
			}
		}
		for _, f := range frames {
			if !seen[f.Stream] {
				seen[f.Stream] = true
				out.streams = append(out.streams, f.Stream)
			}
		}
		out.seqs = append(out.seqs, seq)
		out.frames = append(out.frames, frames)
	}
	return out, nil
}

// sameEntry: two commit records of one seq name the same segment with the same contents.
func sameEntry(a, b wal.CommitRecord) bool {
	return a.Seq == b.Seq && a.Segment == b.Segment && a.CRC32C == b.CRC32C && a.Size == b.Size
}

func (t *walTail) reset() {
	t.entries, t.bytes, t.last = map[uint64]*tailEntry{}, 0, 0
}
