// Package lakequery is the contract behind `skippr query`: SQL over a lake table merged with the rows still in
// the WAL. Three programs take part, and this package is all they share:
//
//   - the lake plugin (iceberg) plans each table's current snapshot into a Plan: the data files, the delete
//     files that apply to each, the schema with field ids and skippr's fence for a pipeline;
//   - the engine reads the WAL's committed entries (never the plugins) and writes a query stream;
//   - the query plugin (duckdb) reads the stream, applies the plans' deletes itself, and merges the WAL rows
//     above the fence: for each primary key the newest version wins, a delete removes the row.
//
// # The query stream
//
// One JSON line (a Request, newline-terminated), then WAL entries as length-delimited (varint, as in
// google.golang.org/protobuf/encoding/protodelim) skippr.plugin.v1.ApplyMessage values: a header
// (pipeline, sequence) starts an entry, then its batches (one Chunk each, the whole Arrow IPC stream in data,
// last set), schema changes and truncates in log order. Entries come in sequence order per pipeline. EOF ends the stream.
package lakequery

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/protobuf/encoding/protodelim"

	pluginv2 "github.com/skippr-dev/skippr/plugin-sdk/proto/skippr/plugin/v2"
)

// ErrSQL marks an error in the SQL itself (the query engine's message): the user fixes the statement. It
// crosses the plugin boundary as INVALID_ARGUMENT.
var ErrSQL = errors.New("query failed")

// ErrMemory marks a query that needed more memory than its Request.MemoryLimit (or the engine's default)
// allows and could not spill. It crosses the plugin boundary as RESOURCE_EXHAUSTED.
var ErrMemory = errors.New("query ran out of memory")

// ErrStale marks a query stream that names WAL entries as sent before (Request.WAL) which the query engine
// does not hold (it restarted, dropped them, or a newer stream moved past the statement's plan): the engine
// sends the statement again with every entry. It crosses the plugin boundary as ABORTED.
var ErrStale = errors.New("the query engine does not hold the WAL entries the stream builds on")

// Services a plugin may offer beside its role (SpecResponse.services).
const (
	ServicePlan    = "lake.plan"
	ServiceCompact = "lake.compact"
	ServiceQuery   = "query.engine"
	// ServiceWALCache: the query engine keeps the WAL entries it was sent between queries and reads
	// Request.WAL, so a long-lived server sends each entry once (see WALState).
	ServiceWALCache = "query.wal-cache"
)

// PlanRequest asks a lake plugin for its tables' current snapshots.
type PlanRequest struct {
	Pipeline string   // report this pipeline's fence for each table
	Streams  []string // empty: every table of the namespace
	FetchDir string   // copy files that are not local into this directory
}

// CompactRequest asks a lake plugin to maintain one table. Zero durations and counts take the plugin's
// defaults; a negative duration keeps everything.
type CompactRequest struct {
	Table            string
	ExpireOlderThan  time.Duration
	RetainLast       int
	OrphansOlderThan time.Duration
	TargetFileSize   int64
}

// Output formats of a query.
const (
	FormatTable   = "table"
	FormatCSV     = "csv"
	FormatJSON    = "json"
	FormatParquet = "parquet"
	// FormatArrow is an Arrow IPC stream (the result's schema, then its record batches as the engine produces
	// them): what `skippr serve` hands to Flight SQL clients without converting a row.
	FormatArrow = "arrow"
)

// Request is the first line of the stream.
type Request struct {
	SQL    string `json:"sql"`
	Format string `json:"format"`
	// AsOfLake ignores the WAL entries: the answer of the lake alone.
	AsOfLake bool `json:"as_of_lake,omitempty"`
	// IncludeDeleted shows the rows a soft-deleting destination (plugin-sdk/rowmeta) flagged deleted: by
	// default a table with a _skippr_deleted column shows only the rows where it is not true. A delete still
	// in the WAL hides its row either way (it shows, flagged, once applied).
	IncludeDeleted bool `json:"include_deleted,omitempty"`
	// MemoryLimit bounds the query engine's memory for this query, in DuckDB's notation ("512MB", "2GB");
	// empty: the engine's default. Past it the engine spills what it can and fails the rest with ErrMemory.
	MemoryLimit string `json:"memory_limit,omitempty"`
	// Lakes are the plans of the lake destinations, one per (pipeline, destination).
	Lakes []Lake `json:"lakes"`
	// WAL, set only for an engine offering ServiceWALCache, says per pipeline which entries the stream holds
	// and which came in earlier streams; without it the stream holds every entry the query sees.
	WAL []WALState `json:"wal,omitempty"`
}

// WALState is what a query stream holds of one pipeline's WAL when the query engine keeps entries between
// queries. Entries are named by Log and seq: an entry of one Log never changes, so an engine that holds entries
// of Log from earlier streams merges them with the stream's. The query sees, for each table, exactly the
// entries above the table's fence (in its plan) and at or below Through: the lake snapshot and the WAL entries
// after it, never an entry in both or in neither.
type WALState struct {
	Pipeline string `json:"pipeline"`
	// Log names the engine's reading of the pipeline's WAL: it changes when the WAL was made again (its seqs
	// restarted), so entries of another Log are never merged.
	Log string `json:"log"`
	// Base: the stream holds the entries above Base (up to Through); those above Floor and at or below Base
	// came in earlier streams of Log. 0: the stream holds them all.
	Base uint64 `json:"base"`
	// Through is the newest entry committed when the statement started: the query sees none after it.
	Through uint64 `json:"through"`
	// Floor: the entries at or below it were applied to every destination and reclaimed; every plan's fence
	// is at or above it, so the engine may drop them.
	Floor uint64 `json:"floor"`
}

// Lake is one destination's plan and the pipeline whose WAL entries merge into it.
type Lake struct {
	Pipeline string `json:"pipeline"`
	Plan     Plan   `json:"plan"`
}

// Plan is the lake plugin's answer for one namespace.
type Plan struct {
	Namespace string      `json:"namespace"`
	Tables    []TablePlan `json:"tables"`
}

// TablePlan is one table's current snapshot. Exists is false for a stream with no table yet (nothing applied).
type TablePlan struct {
	Stream string `json:"stream"`
	// Name is "namespace.table"; Table is the table's own name (which may hold dots, as "public.orders").
	Name       string `json:"name"`
	Table      string `json:"table"`
	Exists     bool   `json:"exists"`
	SnapshotID int64  `json:"snapshot_id,omitempty"`
	// SnapshotTimeMs is when the current snapshot was committed, in Unix milliseconds (0: no snapshot, or
	// a plugin that does not say). `skippr serve` reports it as the table's lake freshness.
	SnapshotTimeMs int64 `json:"snapshot_time_ms,omitempty"`
	// Fence is the last WAL sequence number of the asked pipeline the table holds (0: none). Entries at or
	// below it are in the lake already.
	Fence uint64 `json:"fence"`
	// ArrowSchema is the current schema as an Arrow IPC stream (schema only), each field's id in its metadata
	// under PARQUET:field_id, and a top-level column's initial default under MetaInitialDefault.
	ArrowSchema []byte `json:"arrow_schema,omitempty"`
	// Key holds the identifier fields' names.
	Key   []string   `json:"key,omitempty"`
	Files []PlanFile `json:"files,omitempty"`
}

// PlanFile is one data file and the delete files that apply to it. Path is a local file path (remote files
// are fetched first); Location is the file's name in the table's metadata, which position deletes refer to.
type PlanFile struct {
	Path            string       `json:"path"`
	Location        string       `json:"location"`
	Rows            int64        `json:"rows"`
	PositionDeletes []string     `json:"position_deletes,omitempty"`
	EqualityDeletes []EqDeletion `json:"equality_deletes,omitempty"`
}

// EqDeletion is an equality-delete file and the field ids it matches on.
type EqDeletion struct {
	Path     string `json:"path"`
	FieldIDs []int  `json:"field_ids"`
}

// Writer writes a query stream.
type Writer struct {
	w   io.Writer
	err error
}

// NewWriter writes req's line and returns a Writer for the entries.
func NewWriter(w io.Writer, req Request) (*Writer, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("query request: %w", err)
	}
	if _, err := w.Write(append(b, '\n')); err != nil {
		return nil, fmt.Errorf("write query request: %w", err)
	}
	return &Writer{w: w}, nil
}

func (w *Writer) put(m *pluginv2.ApplyMessage) error {
	if w.err == nil {
		if _, err := protodelim.MarshalTo(w.w, m); err != nil {
			w.err = fmt.Errorf("write query stream: %w", err)
		}
	}
	return w.err
}

// Entry starts WAL entry seq of pipeline.
func (w *Writer) Entry(pipeline string, seq uint64) error {
	return w.put(&pluginv2.ApplyMessage{Msg: &pluginv2.ApplyMessage_Header{Header: &pluginv2.ApplyHeader{Pipeline: pipeline, Sequence: seq}}})
}

// Batch adds a batch (an Arrow IPC stream) of stream to the current entry.
func (w *Writer) Batch(stream string, rows int64, ipc []byte) error {
	return w.put(&pluginv2.ApplyMessage{Msg: &pluginv2.ApplyMessage_Batch{Batch: &pluginv2.Chunk{Stream: stream, Rows: rows, Data: ipc, Last: true}}})
}

// Schema adds a schema change (the stream's Arrow schema as IPC) to the current entry.
func (w *Writer) Schema(stream string, schemaIPC []byte) error {
	return w.put(&pluginv2.ApplyMessage{Msg: &pluginv2.ApplyMessage_Schema{Schema: &pluginv2.SchemaChange{Stream: &pluginv2.Stream{Name: stream, ArrowSchema: schemaIPC}}}})
}

// Truncate adds a truncate of stream to the current entry: the stream's rows before it (in the lake and in
// earlier WAL entries and batches) are gone.
func (w *Writer) Truncate(stream string) error {
	return w.put(&pluginv2.ApplyMessage{Msg: &pluginv2.ApplyMessage_Truncate{Truncate: &pluginv2.Truncate{Stream: stream}}})
}

// Entry is one WAL entry as the reader sees it.
type Entry struct {
	Pipeline string
	Seq      uint64
	// Batches are Arrow IPC streams by stream name, in log order.
	Batches []Batch
}

// Batch is one batch of an entry, or a truncate of its stream (Truncate, no IPC).
type Batch struct {
	Stream   string
	IPC      []byte
	Truncate bool
}

// Reader reads a query stream.
type Reader struct {
	r    *bufio.Reader
	next *pluginv2.ApplyHeader
}

// NewReader reads the request line.
func NewReader(r io.Reader) (*Reader, Request, error) {
	br := bufio.NewReaderSize(r, 1<<20)
	line, err := br.ReadBytes('\n')
	if err != nil {
		return nil, Request{}, fmt.Errorf("read query request: %w", err)
	}
	var req Request
	if err := json.Unmarshal(line, &req); err != nil {
		return nil, Request{}, fmt.Errorf("query request: %w", err)
	}
	return &Reader{r: br}, req, nil
}

// Next returns the next entry, or io.EOF after the last. Schema changes are not returned: every batch
// carries its own schema.
func (r *Reader) Next() (Entry, error) {
	if r.next == nil {
		m, err := r.read()
		if err != nil {
			return Entry{}, err
		}
		h := m.GetHeader()
		if h == nil {
			return Entry{}, fmt.Errorf("query stream: an entry must start with a header")
		}
		r.next = h
	}
	e := Entry{Pipeline: r.next.Pipeline, Seq: r.next.Sequence}
	r.next = nil
	for {
		m, err := r.read()
		if errors.Is(err, io.EOF) {
			return e, nil
		}
		if err != nil {
			return Entry{}, err
		}
		switch x := m.Msg.(type) {
		case *pluginv2.ApplyMessage_Header:
			r.next = x.Header
			return e, nil
		case *pluginv2.ApplyMessage_Batch:
			e.Batches = append(e.Batches, Batch{Stream: x.Batch.Stream, IPC: x.Batch.Data})
		case *pluginv2.ApplyMessage_Truncate:
			e.Batches = append(e.Batches, Batch{Stream: x.Truncate.Stream, Truncate: true})
		}
	}
}

func (r *Reader) read() (*pluginv2.ApplyMessage, error) {
	m := &pluginv2.ApplyMessage{}
	// Batches are as big as WAL entries make them (8 MiB by default, more for one wide row).
	if err := (protodelim.UnmarshalOptions{MaxSize: -1}).UnmarshalFrom(r.r, m); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, io.EOF
		}
		return nil, fmt.Errorf("read query stream: %w", err)
	}
	return m, nil
}

// MetaInitialDefault is the field metadata of a plan's ArrowSchema holding a column's initial default: the
// value a row of a data file that lacks the field (written before the column was added) reads, as text a SQL
// CAST to the column's type reads (7, 1.50, true, 2020-01-02, 2020-01-02 03:04:05.000000+00, or the string
// itself). A field without it reads NULL there.
const MetaInitialDefault = "iceberg.initial-default"
