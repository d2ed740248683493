package pipeline

import (
	"context"
	"sync"

	"github.com/skippr-dev/skippr/engine/wal"
)

// DefaultReadCacheBytes bounds the segments kept for destinations that have not read them yet: eight entries of
// the default 8 MiB, enough for destinations a few entries apart to share every read, small beside the 1 GiB
// the WAL holds unapplied by default. A destination further behind than that reads the log itself.
const DefaultReadCacheBytes = 64 << 20

// segmentReader is what the cache needs of the WAL.
type segmentReader interface {
	ReadSegment(ctx context.Context, rec wal.CommitRecord) ([]wal.Frame, error)
}

// segmentCache lets the apply loops read each committed segment once for all destinations (on S3, one GET
// instead of one per destination). The first destination to need an entry reads it from the log, which checks
// its size and checksum, and keeps the frames for the destinations that still lack that entry; the last of
// them frees it. A destination that asks while the first read is under way waits for it. Kept frames are
// bounded in bytes: past the bound an entry is not kept, and each destination reads it itself. A failed read
// is never kept: every destination then reads, and reports, for itself.
type segmentCache struct {
	log   segmentReader
	limit int64

	mu   sync.Mutex
	held int64
	m    map[uint64]*cachedSegment
}

type cachedSegment struct {
	ready  chan struct{} // closed once frames (or err) are set
	frames []wal.Frame
	err    error
	size   int64
	left   int  // destinations yet to take it
	kept   bool // counted in held
}

func newSegmentCache(log segmentReader, limit int64) *segmentCache {
	return &segmentCache{log: log, limit: limit, m: map[uint64]*cachedSegment{}}
}

// read returns the frames of rec for one destination; others is how many other destinations have not applied
// rec yet and so will ask for it too. The frames are shared: callers must not change them.
func (c *segmentCache) read(ctx context.Context, rec wal.CommitRecord, others int) ([]wal.Frame, error) {
	if rec.Segment == "" || c.limit <= 0 {
		return c.log.ReadSegment(ctx, rec)
	}
	c.mu.Lock()
	if e, ok := c.m[rec.Seq]; ok {
		e.left--
		if e.left <= 0 {
			c.forget(rec.Seq, e)
		}
		c.mu.Unlock()
		select {
		case <-e.ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if e.err != nil {
			// The first reader's failure may be its own (its apply was cancelled): read for this destination.
			return c.log.ReadSegment(ctx, rec)
		}
		return e.frames, nil
	}
	if others <= 0 || rec.Size > c.limit-c.held {
		c.mu.Unlock()
		return c.log.ReadSegment(ctx, rec)
	}
	e := &cachedSegment{ready: make(chan struct{}), left: others}
	c.m[rec.Seq] = e
	c.mu.Unlock()

	frames, err := c.log.ReadSegment(ctx, rec)
	var size int64
	for _, f := range frames {
		size += int64(len(f.Data))
	}
	c.mu.Lock()
	e.frames, e.err, e.size = frames, err, size
	if c.m[rec.Seq] == e {
		if err != nil || c.held+size > c.limit {
			c.forget(rec.Seq, e)
		} else {
			e.kept = true
			c.held += size
		}
	}
	close(e.ready)
	c.mu.Unlock()
	return frames, err
}

// forget drops e, the entry of seq, from the cache. Callers hold c.mu.
func (c *segmentCache) forget(seq uint64, e *cachedSegment) {
	delete(c.m, seq)
	if e.kept {
		c.held -= e.size
		e.kept = false
	}
}

// drop frees every entry through seq: every destination has applied those, so nobody will ask for them (a
// destination whose apply failed before taking its copy would otherwise pin one).
func (c *segmentCache) drop(seq uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for s, e := range c.m {
		if s <= seq {
			c.forget(s, e)
		}
	}
}

// bytes is what the cache holds.
func (c *segmentCache) bytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.held
}
