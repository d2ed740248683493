package pipeline

import (
	"time"

	"github.com/skippr-dev/skippr/engine/wal"
)

// Observer sees the pipeline's work as it happens (for metrics). The read loop, the commit and every apply loop
// call it concurrently: an implementation must be safe for that and must not block, since it runs on the path
// it measures.
type Observer interface {
	// Started is called once the applied points are known: inWAL are the entries still in the log, applied each
	// destination's last applied sequence number (by destination name).
	Started(inWAL []wal.CommitRecord, applied map[string]uint64)
	// Read is called for every batch the source sends, before it is durable.
	Read(stream string, rows, bytes int64)
	// Checkpoint is called for every source checkpoint.
	Checkpoint(cp SourceCheckpoint)
	// Committed is called once an entry is durable in the WAL and the source acknowledged; took spans both.
	Committed(e Entry, took time.Duration)
	// Applied is called once a destination committed an apply: one entry, or a coalesced range of them (e sums
	// the range, e.First..e.Seq); skipped says it had applied all of it before (a replay).
	Applied(destination string, e Entry, skipped bool, took time.Duration)
}

// Entry is one WAL entry as an observer sees it, or, in Applied, the range of entries one apply took.
type Entry struct {
	First     uint64 // the range's first entry; Seq for one entry
	Seq       uint64
	Committed time.Time
	Size      int64 // the segment's bytes in the log
	Streams   map[string]StreamFigures
}

// StreamFigures are one stream's rows and Arrow IPC bytes in an entry.
type StreamFigures struct {
	Rows, Bytes int64
}

// SourceCheckpoint is a source's checkpoint: the position a Read resumes from once everything before it is
// durable, and what the source says about itself at that point.
type SourceCheckpoint struct {
	Position []byte // opaque to the engine
	// RowsDone and RowsTotal are the rows read so far and expected, for progress (0 when unknown).
	RowsDone, RowsTotal int64
	Lag                 time.Duration // the age of the newest change read; 0 when unknown or caught up
	Idle                bool          // the source has nothing more right now (what `sync --once` waits for)
	Metrics             []SourceMetric
}

// SourceMetric is a gauge the source plugin reports (see serve.Metric).
type SourceMetric struct {
	Name   string
	Value  float64
	Labels map[string]string
	Help   string
}

// Entries is how many WAL entries e spans.
func (e Entry) Entries() int {
	if e.First == 0 || e.First > e.Seq {
		return 1
	}
	return int(e.Seq-e.First) + 1
}

func entryOf(rec wal.CommitRecord, frames []wal.Frame) Entry {
	e := Entry{First: rec.Seq, Seq: rec.Seq, Committed: rec.Time, Streams: map[string]StreamFigures{}}
	e.add(rec, frames)
	return e
}

// add counts an entry's segment and figures into e.
func (e *Entry) add(rec wal.CommitRecord, frames []wal.Frame) {
	e.Size += rec.Size
	for _, f := range frames {
		if f.Kind != wal.FrameBatch {
			continue
		}
		s := e.Streams[f.Stream]
		s.Rows += f.Rows
		s.Bytes += int64(len(f.Data))
		e.Streams[f.Stream] = s
	}
}

// noObserver is the Observer of a pipeline run without one.
type noObserver struct{}

func (noObserver) Started([]wal.CommitRecord, map[string]uint64) {}
func (noObserver) Read(string, int64, int64)                     {}
func (noObserver) Checkpoint(SourceCheckpoint)                   {}
func (noObserver) Committed(Entry, time.Duration)                {}
func (noObserver) Applied(string, Entry, bool, time.Duration)    {}
