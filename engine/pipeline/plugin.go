package pipeline

// This file holds what the runner exchanges with its plugins, in the engine's own types. engine/connector maps
// them to the plugin protocol (its wire.go), so a new protocol version changes that adapter, not the commit
// loop: nothing here knows gRPC, protobuf or the chunking of batches.

import (
	"context"
	"iter"
	"time"
)

// Source is what the runner needs of a source plugin. The plugin holds its connection's settings
// (*connector.Plugin is one).
type Source interface {
	// Read starts reading, for the named pipeline, from checkpoint (nil: the beginning) the streams named (none:
	// all), and asks the source to copy the streams of resnapshot again while it streams (`skippr resnapshot`).
	// The source may derive ids from the pipeline's name (the MySQL source's server_id).
	Read(ctx context.Context, pipeline string, streams []string, checkpoint []byte, resnapshot []string) (Messages, error)
	// Ack tells the source that everything through checkpoint is durable in the WAL, so it may release it.
	Ack(ctx context.Context, checkpoint []byte) error
}

// Messages is a running Read of a source.
type Messages interface {
	// Next returns the next message; io.EOF once the source ended the Read.
	Next() (Message, error)
}

// Message is one element of a Read: exactly one field is set.
type Message struct {
	Batch      *Batch
	Schema     *Schema
	Checkpoint *SourceCheckpoint
	Truncate   string // the stream a truncate empties; "" when the message is something else
	Resnapshot *ResnapshotMark
}

// Batch is one Arrow record batch of a stream, as Arrow IPC stream bytes: the WAL keeps the bytes as they
// came, so the engine never decodes a batch it only carries.
type Batch struct {
	Stream string
	Rows   int64
	IPC    []byte
}

// Schema is a stream's new schema: Arrow IPC stream bytes of the schema only.
type Schema struct {
	Stream      string
	ArrowSchema []byte
}

// ResnapshotMark brackets a re-snapshot of one stream: the begin (End false) or the end of its copy.
type ResnapshotMark struct {
	Stream string
	End    bool
}

// Destination is what the runner needs of a destination plugin. The plugin holds its connection's settings
// (*connector.Plugin is one).
type Destination interface {
	// Capabilities says what the destination can do; the runner asks once per run.
	Capabilities(ctx context.Context) (Capabilities, error)
	// LastApplied is the highest WAL sequence number the destination holds for pipeline (0: none, or a
	// destination that records nothing).
	LastApplied(ctx context.Context, pipeline string) (uint64, error)
	// ApplyRange applies the entries first..last atomically (first == last unless the destination coalesces);
	// items is pulled as it is sent, and a cancelled ctx aborts the apply without a commit.
	ApplyRange(ctx context.Context, pipeline string, first, last uint64, items iter.Seq[ApplyItem]) (ApplyResult, error)
}

// ApplyItem is one element of an apply: exactly one field is set. Entry marks that the items after it belong
// to that WAL entry; it is sent, before each entry, only in a range of several.
type ApplyItem struct {
	Batch      *Batch
	Schema     *Schema
	Truncate   string // the stream a truncate empties
	Entry      uint64
	Resnapshot *ResnapshotMark
}

// ApplyResult is a destination's answer to a committed apply.
type ApplyResult struct {
	Skipped bool // it held the range already (a replay) and applied nothing
	Rows    int64
}

// Capabilities are what a destination can do.
type Capabilities struct {
	ExactlyOnce     bool
	ExactlyOnceNote string // why not, when ExactlyOnce is false
	Deletes         bool
	SchemaEvolution bool
	Truncate        bool // applies truncates in order with the rows around them
	Coalesce        bool // applies a range of WAL entries in one atomic apply
	Resnapshot      bool // applies re-snapshot marks
	FullRow         bool // applies streams matched by full row (change.FullRow), one row per delete
	RenamedStream   bool // follows a renamed stream (change.RenamedFromTableMeta)
	// UnsupportedTypes are Arrow type names (arrow.DataType.Name()) the destination cannot hold at any depth.
	UnsupportedTypes []string
	// ApplyDefaults are the apply limits the destination proposes; nil: no proposal.
	ApplyDefaults *ApplyDefaults
}

// ApplyDefaults are a destination's proposed apply limits; 0 (or less) is no proposal for that limit.
type ApplyDefaults struct {
	MaxInterval time.Duration
	MaxBytes    int64
	MaxEntries  int64
}
