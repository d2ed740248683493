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
//
// When the query engine keeps the entries it was sent (sdk.ServiceWALCache), the tail also remembers the
// newest entry sent in a stream (sent) for its generation (gen, which names the Log in sdk.WALState and moves
// whenever the cache starts over): a statement then reads and sends only the entries above it.
type walTail struct {
	limit int64 // bytes of decoded frames kept; 0: none

	mu      sync.Mutex
	bytes   int64
	last    uint64 // the newest seq listed
	entries map[uint64]*tailEntry
	gen     uint64 // moves at every reset
	sent    uint64 // the newest entry of gen sent to the query engine in a stream
}

type tailEntry struct {
	rec     wal.CommitRecord
	frames  []wal.Frame // nil: not kept (over the limit); read again
	size    int64
	streams []string // of its frames, once read
}

func newWALTail(limit int64) *walTail {
	return &walTail{limit: limit, entries: map[uint64]*tailEntry{}}
}

// tailAttempts bounds the retries when a reclaim runs between the Head and the listing.
const tailAttempts = 3

// read returns the committed, unreclaimed entries of l as of now. When incremental, the frames of the entries
// already sent to the query engine (at or below out.base) are left out (nil), and not read.
func (t *walTail) read(ctx context.Context, l walReader, pipeline string, incremental bool) (walEntries, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var (
		h    wal.Head
		recs []wal.CommitRecord
		err  error
	)
	for attempt := 1; ; attempt++ {
		if h, err = l.Head(ctx); err != nil {
			return walEntries{}, headErr(pipeline, err)
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
	out := walEntries{gen: t.gen, through: t.last, floor: h.ReclaimedThrough}
	if incremental {
		out.base = t.sent
	}
	seen := map[string]bool{}
	for _, seq := range seqs {
		e := t.entries[seq]
		frames := e.frames
		if seq <= out.base && e.streams != nil {
			// Sent before: the engine holds it. Only its streams are needed (the plan lists them).
			for _, st := range e.streams {
				if !seen[st] {
					seen[st] = true
					out.streams = append(out.streams, st)
				}
			}
			out.seqs = append(out.seqs, seq)
			out.frames = append(out.frames, nil)
			continue
		}
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
		if e.streams == nil {
			e.streams = []string{}
			for _, f := range frames {
				if !slices.Contains(e.streams, f.Stream) {
					e.streams = append(e.streams, f.Stream)
				}
			}
		}
		for _, st := range e.streams {
			if !seen[st] {
				seen[st] = true
				out.streams = append(out.streams, st)
			}
		}
		if frames == nil {
			frames = []wal.Frame{} // sent, even if empty: nil marks an entry left out
		}
		out.seqs = append(out.seqs, seq)
		out.frames = append(out.frames, frames)
	}
	return out, nil
}

// markSent records that a stream of generation gen held every entry up to through.
func (t *walTail) markSent(gen, through uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if gen == t.gen {
		t.sent = max(t.sent, through)
	}
}

// forget makes the next statement send every entry again, under a new generation: the query engine did not
// hold what the tail thought it sent.
func (t *walTail) forget() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.gen++
	t.sent = 0
}

// sameEntry: two commit records of one seq name the same segment with the same contents.
func sameEntry(a, b wal.CommitRecord) bool {
	return a.Seq == b.Seq && a.Segment == b.Segment && a.CRC32C == b.CRC32C && a.Size == b.Size
}

func (t *walTail) reset() {
	t.entries, t.bytes, t.last = map[uint64]*tailEntry{}, 0, 0
	t.gen++
	t.sent = 0
}
