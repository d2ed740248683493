package wal

import (
	"context"
	"log/slog"
	"time"
)

// object is one listed object: its name relative to the log root and its size.
type object struct {
	name string
	size int64
}

// store is what the Log needs from a backend. Names are slash-separated and
// relative to the log root ("commits/000…01.json").
type store interface {
	// url names an object (or the root, for "") in error messages.
	url(name string) string
	// prepare makes the root writable (local: creates directories).
	prepare(ctx context.Context) error
	// put stores data durably, replacing any object of that name.
	put(ctx context.Context, name string, data []byte) error
	// create stores data durably only if name does not exist yet; errExists otherwise.
	create(ctx context.Context, name string, data []byte) error
	// get returns the whole object, or errNotFound.
	get(ctx context.Context, name string) ([]byte, error)
	// list returns the objects directly under dir whose names sort after
	// startAfter (a full name, or ""), in ascending order.
	list(ctx context.Context, dir, startAfter string) ([]object, error)
	// remove deletes an object; a missing object is not an error.
	remove(ctx context.Context, name string) error
	// sweep removes backend debris (temp files) left by a crashed writer; lease holders only.
	sweep(ctx context.Context) error
	// lock takes the writer lease, or fails with ErrLocked naming the holder.
	lock(ctx context.Context, req lockRequest) (writerLease, error)
	// holder reports the live lease holder ("" if none) and the newest epoch.
	holder(ctx context.Context) (owner string, epoch uint64, err error)
	close() error
}

type lockRequest struct {
	owner string
	ttl   time.Duration
	// minEpoch is the highest epoch seen in segment names: the new epoch must exceed it.
	minEpoch uint64
	// epoch, when not 0, is the epoch to take, given by an outside election (Options.Epoch).
	epoch uint64
	log   *slog.Logger
}

// writerLease is the right to append, held from Acquire to Close.
type writerLease interface {
	epoch() uint64
	owner() string
	// takenOver says why the lease was taken from a holder that never released
	// it ("" if it was free), so that holder may still have a write in flight:
	// Acquire then writes a fence entry.
	takenOver() string
	// check returns an error wrapping ErrFenced once this writer may no longer write.
	check() error
	// deadline is when writes must have finished (zero: no time limit).
	deadline() time.Time
	release(ctx context.Context) error
}

// reserver is a store that sets space aside for Reclaim. Reclaim must write a
// checkpoint record before it may delete anything, so on a disk filled by
// entries every destination has applied it could otherwise free nothing, and
// the pipeline would wait forever. S3 does not fill, so only the local store
// is one.
type reserver interface {
	// reserve sets the space aside unless it already is.
	reserve() error
	// unreserve gives it up; an error means there was none to give.
	unreserve() error
}
