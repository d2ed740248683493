package wal

import (
	"errors"
	"fmt"
	"syscall"
)

// Sentinel errors. Callers test with errors.Is; the wrapping error names the
// log, the sequence number and the object involved.
var (
	// ErrLocked: another live writer holds the lease (or the lock file).
	ErrLocked = errors.New("wal locked by another writer")
	// ErrFenced: this writer lost its lease or another writer committed the
	// sequence number it wanted; it must stop and reopen.
	ErrFenced = errors.New("wal writer fenced")
	// ErrCorrupt: an object's size, CRC-32C or framing is wrong.
	ErrCorrupt = errors.New("wal data corrupt")
	// ErrMissing: a commit record names a segment that does not exist.
	ErrMissing = errors.New("wal object missing")
	// ErrReclaimed: the caller asked for entries that Reclaim already deleted.
	ErrReclaimed = errors.New("wal entries reclaimed")
	// ErrReadOnly: a write was attempted before Acquire.
	ErrReadOnly = errors.New("wal opened read-only: call Acquire first")
	// ErrClosed: the Log was closed.
	ErrClosed = errors.New("wal closed")
	// ErrNoSpace: the WAL's file system is full (ENOSPC or EDQUOT). The write
	// left nothing behind and the Log stays usable: retry the same Commit once
	// Reclaim (or someone) has freed space.
	ErrNoSpace = errors.New("no space left for the WAL")
)

// noSpace marks err with ErrNoSpace when the file system ran out of room.
func noSpace(err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return fmt.Errorf("%w: %w", ErrNoSpace, err)
	}
	return err
}

// Internal store outcomes; never returned to callers unwrapped.
var (
	errNotFound = errors.New("not found")
	errExists   = errors.New("already exists")
	errCASLost  = errors.New("precondition failed")
	// errNotWritten: a create failed before the object could exist, so its
	// outcome is known (the local store's temp file or link(2) failed).
	errNotWritten = errors.New("not written")
)

// reasonError carries a precise reason ("crc mismatch: want 1 got 2") while
// still matching a sentinel with errors.Is, without repeating the sentinel's
// text in the message.
type reasonError struct {
	reason string
	kind   error
}

func (e *reasonError) Error() string { return e.reason }
func (e *reasonError) Unwrap() error { return e.kind }

func corrupt(reason string) error { return &reasonError{reason: reason, kind: ErrCorrupt} }

// missingEntry is ErrMissing for a commit record: seq is the entry whose record is absent. A reader tells a
// Reclaim that deleted it (seq at or below the reclaim mark read afterwards) apart from a lost one by it.
type missingEntry struct {
	seq    uint64
	reason string
}

func (e *missingEntry) Error() string { return e.reason }
func (e *missingEntry) Unwrap() error { return ErrMissing }
