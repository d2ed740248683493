package serve

import (
	"context"
	"encoding/json"
	"iter"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
)

// Kind says which roles a plugin plays.
type Kind int

const (
	KindSource Kind = iota + 1
	KindDestination
	KindBoth
)

func (k Kind) String() string {
	switch k {
	case KindSource:
		return "source"
	case KindDestination:
		return "destination"
	case KindBoth:
		return "both"
	}
	return "unknown"
}

// Spec describes a plugin.
type Spec struct {
	Name        string
	Version     string // semantic version of the plugin binary
	Kind        Kind
	Description string
	// SettingsSchema is the JSON Schema of the settings object; the engine validates configs against it.
	SettingsSchema json.RawMessage
}

// Plugin is what every plugin implements, plus Source, Destination or both.
type Plugin interface {
	Spec() Spec
	// Check tests the settings for real (connect, authenticate, look for privileges) and returns an error
	// that tells the user what is missing and how to fix it.
	Check(ctx context.Context, settings json.RawMessage) error
}

// SyncMode says how a stream can be read.
type SyncMode int

const (
	ModeSnapshot SyncMode = iota + 1
	ModeCDC
	ModeAppendOnly
)

// Stream is one table or feed.
type Stream struct {
	Name string
	// Schema is the change schema (see package change): data fields, reserved columns, primary key metadata.
	Schema     *arrow.Schema
	PrimaryKey []string
	Modes      []SyncMode
}

// Checkpoint marks a point in the source after which reading can resume. Everything emitted before it belongs
// to it: the engine acknowledges it only when all of that is durable, and never splits what lies between two
// checkpoints across a crash, so a source emits checkpoints only at transaction boundaries.
type Checkpoint struct {
	Position  []byte
	RowsDone  int64 // progress, when known
	RowsTotal int64
	LagMS     int64
	// Idle says the source has nothing more for now (`skippr sync --once` stops at the first idle checkpoint
	// once it is applied).
	Idle bool
	// Metrics are the source's own gauges as of this checkpoint (see Metric).
	Metrics []Metric
}

// Metric is a gauge a source reports on a checkpoint; the engine exposes it as skippr_source_<Name> with the
// pipeline's name and Labels. Name and label names match [a-z_][a-z0-9_]*; the engine drops (and logs once) a
// malformed one. A state is a gauge set to 1 with the state as a label (wal_status="reserved"). Each checkpoint
// that carries a name replaces every series of that name, so a state that ended disappears.
type Metric struct {
	Name   string
	Value  float64
	Labels map[string]string
	Help   string
}

// Emitter carries what a source reads to the engine. Its methods are safe for concurrent use, but the order
// of calls is the order of the log.
type Emitter interface {
	// Batch sends a change batch of one stream. The emitter does not keep rec; the caller still releases it.
	Batch(ctx context.Context, stream string, rec arrow.RecordBatch) error
	// SchemaChange announces a stream's new schema before the first batch that uses it.
	SchemaChange(ctx context.Context, s Stream) error
	// Truncate says the stream was emptied at this point of the log: rows sent before it are gone, rows after
	// it are kept. Destinations without Capabilities.Truncate are refused at start when a source may send it.
	Truncate(ctx context.Context, stream string) error
	// Resnapshot marks the begin (end = false) or the end of a re-snapshot of stream (see ReadRequest.Resnapshot):
	// between the two the source sends the stream's current rows as snapshot reads beside its changes.
	Resnapshot(ctx context.Context, stream string, end bool) error
	Checkpoint(ctx context.Context, cp Checkpoint) error
}

// Source reads changes.
type Source interface {
	Plugin
	Discover(ctx context.Context, settings json.RawMessage) ([]Stream, error)
	// Read emits changes after checkpoint (nil: from the beginning) until ctx is cancelled or an error occurs.
	// A source that has read everything emits an idle checkpoint and keeps waiting for new changes.
	Read(ctx context.Context, req ReadRequest, out Emitter) error
	// Ack says a checkpoint and everything before it is durable in the engine: the source may release it
	// (advance a replication slot, delete a spool file). Acks arrive in order; one may cover several checkpoints.
	Ack(ctx context.Context, checkpoint []byte) error
}

// Resnapshotter is a source that can copy streams again while it streams (ReadRequest.Resnapshot): Serve
// announces the service protocol.ServiceResnapshot when CanResnapshot says so. A source without it gets no
// re-snapshot requests: the engine refuses them up front.
type Resnapshotter interface {
	CanResnapshot() bool
}

// ReadRequest is the input of Source.Read.
type ReadRequest struct {
	Settings   json.RawMessage
	Streams    []string // empty: all
	Checkpoint []byte
	// Resnapshot names streams to copy again while the changes go on (`skippr resnapshot`). A source that can
	// brackets each copy with Emitter.Resnapshot marks, keeps a copy already in progress (per Checkpoint) where it
	// is, and carries every stream named here in each checkpoint it emits, so the engine forgets the request once
	// such a checkpoint is durable. A source that cannot refuses with a config error.
	Resnapshot []string
	// Pipeline is the name of the pipeline that reads ("" from an engine older than this field). A source whose
	// server tells readers apart by an id it derives (the MySQL binlog client's server_id) mixes it in, so two
	// pipelines over the same tables get different ids; it must keep working when it is "".
	Pipeline string
}

// Capabilities tells the engine what a destination honours.
type Capabilities struct {
	ExactlyOnce     bool
	Deletes         bool
	SchemaEvolution bool
	// ExactlyOnceNote says why exactly-once is not offered; the engine quotes it when it refuses a pipeline.
	ExactlyOnceNote string
	// Truncate: the destination applies a truncate item in order with the rows around it, in the same commit.
	Truncate bool
	// Coalesce: the destination takes a range of WAL sequence numbers in one apply (see ApplyRequest). The
	// engine then sends a destination that is behind everything committed up to its apply limits at once,
	// which is what makes a lake snapshot or a warehouse MERGE per range rather than per entry affordable.
	Coalesce bool
	// Resnapshot: the destination applies resnapshot marks (Item.Resnapshot): at an end mark it removes, in the
	// same commit, every row of the stream it did not receive since the begin mark, however many applies lie
	// between the two. The engine refuses a `skippr resnapshot` request unless every destination has it.
	Resnapshot bool
	// FullRow: the destination applies streams matched by full row (change.FullRow: keyless tables with full
	// row images) in order, each delete removing exactly one row equal to its image. The engine refuses at
	// start a pipeline that sends such a stream to a destination without it.
	FullRow bool
	// RenamedStream: the destination follows a renamed stream (Item.RenamedFromTable: the source renamed table a
	// to b, and b's schema says so): it renames a's table and what it keeps per stream to b, in order with the
	// items around it (conformance.CheckRenamedStream). The engine stops a pipeline before it commits a rename
	// when a destination lacks it: such a destination would leave a's rows behind and start b empty.
	RenamedStream bool
	// ApplyDefaults proposes apply limits for a connection that leaves them out of its `apply:`; the engine
	// logs each one it takes. Zero fields propose nothing. Only a destination with Coalesce gets ranges, so
	// only its proposals matter.
	ApplyDefaults ApplyDefaults
}

// ApplyDefaults are the apply limits a destination proposes. A warehouse, where every commit spends compute
// credits, proposes a MaxInterval of a minute so that a caught-up pipeline commits once a minute, not per entry.
type ApplyDefaults struct {
	MaxInterval time.Duration // rounded down to milliseconds on the wire
	MaxBytes    int64         // of WAL entries in one apply
	MaxEntries  int64         // WAL entries in one apply
}

// TypeLimits is implemented by a destination that cannot hold some Arrow types. UnsupportedTypes returns
// their names (arrow.DataType.Name(), e.g. "decimal256"), which count at any depth of a column's type; the
// engine refuses a pipeline at start, naming the table, column and type, when a source stream has one. It is
// sent as CapabilitiesResponse.unsupported_types.
type TypeLimits interface {
	UnsupportedTypes() []string
}

// ResnapshotMark is the kind of a resnapshot item: ResnapshotNone for every other item.
type ResnapshotMark int

const (
	ResnapshotNone ResnapshotMark = iota
	// ResnapshotBegin: from here on, remember which rows of the stream arrive.
	ResnapshotBegin
	// ResnapshotEnd: remove the rows of the stream that did not arrive since ResnapshotBegin.
	ResnapshotEnd
)

// Item is one element of an apply, in log order: a batch, a schema change, a truncate or a resnapshot mark.
type Item struct {
	Stream string
	Record arrow.RecordBatch // a change batch, or nil for a schema change or truncate
	Schema *Stream           // the new schema, for a schema change
	// Truncate: the stream was emptied here; rows of earlier items of the stream are gone, later ones kept.
	Truncate bool
	// Resnapshot marks the begin or the end of a re-snapshot of the stream (see Capabilities.Resnapshot).
	Resnapshot ResnapshotMark
	// Sequence is the WAL entry the item belongs to: within [FirstSequence, Sequence] of its ApplyRequest.
	Sequence uint64
}

// RenamedFromTable is the stream's former name that the item's schema records (change.RenamedFromTableMeta: a
// RENAME TABLE at the source), from a schema change or a batch alike; "" when none.
func (it Item) RenamedFromTable() string {
	var s *arrow.Schema
	switch {
	case it.Schema != nil:
		s = it.Schema.Schema
	case it.Record != nil:
		s = it.Record.Schema()
	}
	return change.RenamedFromTable(s)
}

// ApplyRequest carries the content of one WAL sequence number, or of the range [FirstSequence, Sequence] when
// the destination offers Capabilities.Coalesce. The apply is atomic over the whole range and the destination
// records Sequence, the range's last, as what it holds. Every item says which entry it came from, so a
// destination that already holds part of a range (its fence f lies in [FirstSequence, Sequence)) applies only the
// items with Item.Sequence > f; one that holds Sequence skips the apply.
type ApplyRequest struct {
	Settings      json.RawMessage
	Pipeline      string
	FirstSequence uint64 // equal to Sequence for one entry
	Sequence      uint64
	Items         []Item
}

// Covers reports whether a destination holding fence already holds every item of the request: the apply is a
// replay to skip.
func (r ApplyRequest) Covers(fence uint64) bool { return fence >= r.Sequence }

// ApplyResult reports an apply.
type ApplyResult struct {
	Skipped bool // the destination already held this sequence number
	Rows    int64
}

// Applied is what a destination holds for one pipeline, as LastApplied reports it.
type Applied struct {
	// Sequence is the fence: the highest WAL sequence number the destination committed for the pipeline, in the
	// same transaction as the data (0 for a pipeline it never applied). The engine resumes after it, so it must
	// never be ahead of the data; an exactly-once destination records it, an at-least-once one may report 0.
	Sequence uint64
	// Streams is, per stream, the highest sequence number whose apply carried rows of that stream (a stream
	// absent: none yet). It is informational: the engine reads only Sequence today, and a destination that does
	// not track it leaves it empty (serve sends an empty map, never nil). It must not exceed Sequence.
	Streams map[string]uint64
}

// Destination writes changes. Apply must be atomic: after a crash, either the whole sequence number and the
// record of it are in the destination, or neither is; a sequence number at or below LastApplied is skipped.
type Destination interface {
	Plugin
	Capabilities(ctx context.Context, settings json.RawMessage) (Capabilities, error)
	Apply(ctx context.Context, req ApplyRequest) (ApplyResult, error)
	LastApplied(ctx context.Context, settings json.RawMessage, pipeline string) (Applied, error)
}

// StreamingDestination is a Destination that takes an apply's items as they arrive rather than all at once.
// Apply receives the whole WAL entry in memory at once; a destination implementing this can bound its
// memory by what it chooses to buffer, whatever the entry's size. Serve calls ApplyStream instead of Apply when
// a plugin implements it; Apply stays for in-process callers.
type StreamingDestination interface {
	Destination
	// ApplyStream applies one sequence number: req.Items is empty and items yields them in log order, each
	// batch decoded as it arrives. A yielded record belongs to the SDK and is valid only until the loop asks
	// for the next item: the SDK releases it then, so a destination that keeps a record longer must Retain
	// it (and Release it when done). items is single-use; an error it yields (the engine's stream broke, a
	// malformed batch) ends the apply, and ApplyStream must then return an error. ApplyStream may stop early
	// (a skipped sequence number): the SDK discards the rest of the stream without decoding it.
	ApplyStream(ctx context.Context, req ApplyRequest, items iter.Seq2[Item, error]) (ApplyResult, error)
}

// TearingDown is implemented by a source that holds server-side resources for a pipeline (a replication
// slot, a publication). `skippr teardown` calls it when a pipeline is dropped; it returns what it released.
type TearingDown interface {
	Teardown(ctx context.Context, settings json.RawMessage) ([]string, error)
}

// PipelineTearingDown is TearingDown for a source whose server-side state is named after the pipeline that
// read (ReadRequest.Pipeline): it is told which pipeline was dropped ("" from an engine older than that field).
// Serve prefers it to TearingDown.
type PipelineTearingDown interface {
	TeardownPipeline(ctx context.Context, settings json.RawMessage, pipeline string) ([]string, error)
}
