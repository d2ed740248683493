package protocol

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/arrow/util"
)

// EncodeRecord writes one record batch as a self-contained Arrow IPC stream.
func EncodeRecord(mem memory.Allocator, rec arrow.RecordBatch) ([]byte, error) {
	var buf bytes.Buffer
	if err := EncodeRecordTo(&buf, mem, rec); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// EncodeRecordTo is EncodeRecord into buf, which it resets first: a sender that encodes batch after batch
// reuses one buffer instead of allocating (and the runtime zeroing and collecting) a batch-sized one each time.
func EncodeRecordTo(buf *bytes.Buffer, mem memory.Allocator, rec arrow.RecordBatch) error {
	buf.Reset()
	// Sized up front: grown from empty, the buffer's copies and clears were a seventh of a source plugin's
	// CPU in the Postgres snapshot profile (BENCHMARKS.md). The schema and framing take a few KiB more.
	buf.Grow(int(util.TotalRecordSize(rec)) + 8<<10)
	w := ipc.NewWriter(buf, ipc.WithSchema(rec.Schema()), ipc.WithAllocator(mem))
	if err := w.Write(rec); err != nil {
		return fmt.Errorf("encode arrow batch: %w", err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("encode arrow batch: %w", err)
	}
	return nil
}

// DecodeRecords reads every record batch of an Arrow IPC stream. The caller releases each record.
func DecodeRecords(mem memory.Allocator, data []byte) ([]arrow.RecordBatch, *arrow.Schema, error) {
	r, err := ipc.NewReader(bytes.NewReader(data), ipc.WithAllocator(mem))
	if err != nil {
		return nil, nil, fmt.Errorf("decode arrow batch: %w", err)
	}
	defer r.Release()
	var out []arrow.RecordBatch
	for r.Next() {
		rec := r.RecordBatch()
		rec.Retain()
		out = append(out, rec)
	}
	if err := r.Err(); err != nil {
		for _, rec := range out {
			rec.Release()
		}
		return nil, nil, fmt.Errorf("decode arrow batch: %w", err)
	}
	return out, r.Schema(), nil
}

// EncodeSchema writes a schema alone as an Arrow IPC stream.
func EncodeSchema(mem memory.Allocator, s *arrow.Schema) ([]byte, error) {
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(s), ipc.WithAllocator(mem))
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("encode arrow schema: %w", err)
	}
	return buf.Bytes(), nil
}

// DecodeSchema reads the schema of an Arrow IPC stream.
func DecodeSchema(mem memory.Allocator, data []byte) (*arrow.Schema, error) {
	r, err := ipc.NewReader(bytes.NewReader(data), ipc.WithAllocator(mem))
	if err != nil {
		return nil, fmt.Errorf("decode arrow schema: %w", err)
	}
	defer r.Release()
	return r.Schema(), nil
}

// SchemaID is a stable fingerprint of a schema, fields and metadata included.
func SchemaID(s *arrow.Schema) string {
	sum := sha256.Sum256([]byte(s.String()))
	return hex.EncodeToString(sum[:8])
}

// SchemaIDs remembers the id of the schema last seen per stream. SchemaID formats and hashes the whole
// schema, which cost a streaming source about 4% of its CPU when done for every batch (one batch per
// transaction: BENCHMARKS.md); batches of one stream nearly always share one *arrow.Schema, and a schema
// never changes once built, so the same pointer has the same id. The zero value is ready; not safe for
// concurrent use.
type SchemaIDs struct {
	last map[string]schemaID
}

type schemaID struct {
	schema *arrow.Schema
	id     string
}

// ID is SchemaID(s), computed again only when stream's schema is not the one of its last call.
func (c *SchemaIDs) ID(stream string, s *arrow.Schema) string {
	if l, ok := c.last[stream]; ok && l.schema == s {
		return l.id
	}
	if c.last == nil {
		c.last = map[string]schemaID{}
	}
	id := SchemaID(s)
	c.last[stream] = schemaID{schema: s, id: id}
	return id
}
