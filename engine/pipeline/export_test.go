package pipeline

import (
	"context"

	"github.com/skippr-dev/skippr/engine/wal"
)

// Items is items, for tests that hand WAL frames to a destination as the apply loop does.
var Items = items

// TakeRange is takeRange, for the table test of range selection.
var TakeRange = takeRange

// ResolveApply is resolveApply after proposalOf, for the table test of plugin-proposed apply limits.
func ResolveApply(lim ApplyLimits, p *ApplyDefaults) (ApplyLimits, []string) {
	return resolveApply(lim, proposalOf(p))
}

// SegmentCache is segmentCache, for its unit tests.
type SegmentCache = segmentCache

// NewSegmentCache is newSegmentCache.
var NewSegmentCache = newSegmentCache

func (c *segmentCache) Read(ctx context.Context, rec wal.CommitRecord, others int) ([]wal.Frame, error) {
	return c.read(ctx, rec, others)
}
func (c *segmentCache) Drop(seq uint64) { c.drop(seq) }
func (c *segmentCache) Bytes() int64    { return c.bytes() }
