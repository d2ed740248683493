package lakequery

import (
	"context"
	"errors"
	"fmt"

	"github.com/skippr-dev/skippr/engine/wal"
)

// ErrRetry marks a statement that failed because the WAL moved under it: its entries were reclaimed between
// the listing and the reading more often than the statement looks again (tailAttempts). Nothing is wrong with
// the data, and the same statement asked again answers; `skippr serve` sends it as codes.Unavailable, the code
// gRPC clients retry. Test with errors.Is.
var ErrRetry = errors.New("retry the query")

// walReader is what walTail reads of a pipeline's log: *wal.Log, opened without its lease.
type walReader interface {
	Head(ctx context.Context) (wal.Head, error)
	Entries(ctx context.Context, after uint64) ([]wal.CommitRecord, error)
	ReadSegment(ctx context.Context, rec wal.CommitRecord) ([]wal.Frame, error)
}

// headErr names the pipeline in an error of its WAL's Head, marked ErrRetry when Reclaims kept removing the
// entries the Head listed (wal.ErrReclaimed: it looked again already).
func headErr(pipeline string, err error) error {
	if errors.Is(err, wal.ErrReclaimed) {
		return fmt.Errorf("pipeline %s: %w: %w", pipeline, err, ErrRetry)
	}
	return fmt.Errorf("pipeline %s: %w", pipeline, err)
}
