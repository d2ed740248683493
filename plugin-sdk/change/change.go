// Package change defines how a change row travels: an ordinary Arrow record batch of one stream with its
// reserved columns (the op, and optionally the source position and commit time), and the stream's primary key
// in the schema's metadata. plugin-sdk/README.md is the
// user-facing description; this file is the one definition.
package change

import (
	"fmt"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
)

// Op is what happened to a row.
type Op int8

const (
	// OpRead is a row read by a snapshot: an upsert that is not a change event.
	OpRead Op = 0
	// OpInsert is a new row.
	OpInsert Op = 1
	// OpUpdate replaces the row with the same key; all columns carry the new values.
	OpUpdate Op = 2
	// OpDelete removes the row with the same key; only key columns need values, the rest are null.
	OpDelete Op = 3
)

func (o Op) String() string {
	switch o {
	case OpRead:
		return "read"
	case OpInsert:
		return "insert"
	case OpUpdate:
		return "update"
	case OpDelete:
		return "delete"
	}
	return fmt.Sprintf("op(%d)", int8(o))
}

const (
	// OpColumn is the required int8 column holding each row's Op.
	OpColumn = "_skippr_op"
	// PosColumn is the optional, nullable utf8 column holding each row's source position (an LSN, a binlog
	// position, a row counter), for lineage and debugging; ordering comes from the batch order, not from it.
	PosColumn = "_skippr_pos"
	// CommittedColumn is the optional, nullable timestamp column (microseconds, UTC) holding when the source
	// committed each row's change: the commit of its transaction as the source database records it, at the
	// source's precision (Postgres: microseconds, from the Commit message; MySQL/MariaDB: seconds, from the
	// binlog event header; HTTP: when the request was received). Null where there is no such time: a row read
	// by a snapshot is not a change and carries null. A batch without the column (written before it existed,
	// or by a source that does not fill it) means null for every row. Destinations write it only where the
	// user asks for it (rowmeta's source_committed_at); it is never a user column.
	CommittedColumn = "_skippr_committed_at"
	// PrimaryKeyMeta is the schema metadata key listing the primary key columns, comma separated.
	PrimaryKeyMeta = "skippr.primary_key"
	// MatchMeta is the schema metadata key saying how the stream's deletes find their row. Absent: by the
	// primary key (PrimaryKeyMeta), or, without one, the stream has inserts only. MatchFullRow: the stream has
	// no key (a keyless table with full row images: PostgreSQL REPLICA IDENTITY FULL, MySQL binlog_row_image
	// FULL); a delete carries the whole old row in every data column and removes exactly one row equal to it
	// in every column, NULL equal to NULL, so that a table holding identical rows keeps the right number of
	// each; an update travels as that delete followed by an insert of the new row (OpUpdate is refused).
	// Such a stream is folded in order without per-key collapse (Fold.AddFullRow), and only a destination
	// whose capabilities say full_row receives one: the engine refuses the pipeline at start otherwise.
	MatchMeta = "skippr.match"
	// MatchFullRow is MatchMeta's value for a stream matched by full row.
	MatchFullRow = "full_row"
	// ReservedPrefix marks columns that belong to the protocol, not to the user's data.
	ReservedPrefix = "_skippr_"
	// MetaColumn is the one column with the reserved prefix that is data: the nullable utf8 JSON a source adds
	// when its on_unrepresentable policy is null_and_record (plugin-sdk/values), written by destinations like
	// any other column.
	MetaColumn = "_skippr_meta"
)

// Reserved says whether a column belongs to the protocol only (op, position...), not to the destination's table.
func Reserved(name string) bool {
	return strings.HasPrefix(name, ReservedPrefix) && name != MetaColumn
}

// OpField and PosField are the reserved fields as sources should declare them.
var (
	OpField  = arrow.Field{Name: OpColumn, Type: arrow.PrimitiveTypes.Int8}
	PosField = arrow.Field{Name: PosColumn, Type: arrow.BinaryTypes.String, Nullable: true}
	// CommittedField is the commit-time column as sources should declare it.
	CommittedField = arrow.Field{Name: CommittedColumn, Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, Nullable: true}
)

// Schema builds a change schema: the data fields, then the reserved columns, with the primary key recorded.
func Schema(fields []arrow.Field, primaryKey []string) *arrow.Schema {
	all := append(append([]arrow.Field{}, fields...), OpField, PosField)
	md := arrow.NewMetadata([]string{PrimaryKeyMeta}, []string{strings.Join(primaryKey, ",")})
	return arrow.NewSchema(all, &md)
}

// TimedSchema is Schema with the commit-time column last, for a source that knows when its changes were
// committed (Builder.RowAt fills it).
func TimedSchema(fields []arrow.Field, primaryKey []string) *arrow.Schema {
	all := append(append([]arrow.Field{}, fields...), OpField, PosField, CommittedField)
	md := arrow.NewMetadata([]string{PrimaryKeyMeta}, []string{strings.Join(primaryKey, ",")})
	return arrow.NewSchema(all, &md)
}

// PrimaryKey returns the key columns recorded in the schema, nil when the stream has none.
func PrimaryKey(s *arrow.Schema) []string {
	v, ok := s.Metadata().GetValue(PrimaryKeyMeta)
	if !ok || v == "" {
		return nil
	}
	return strings.Split(v, ",")
}

// FullRow says the stream's deletes match whole rows (MatchMeta is MatchFullRow).
func FullRow(s *arrow.Schema) bool {
	v, ok := s.Metadata().GetValue(MatchMeta)
	return ok && v == MatchFullRow
}

// WithFullRow returns s marked as matched by full row (MatchMeta), for a source's keyless table with full row
// images. s should have no primary key.
func WithFullRow(s *arrow.Schema) *arrow.Schema {
	md := s.Metadata()
	keys, vals := md.Keys(), md.Values()
	if i := md.FindKey(MatchMeta); i >= 0 {
		vals = append([]string{}, vals...)
		vals[i] = MatchFullRow
	} else {
		keys, vals = append(append([]string{}, keys...), MatchMeta), append(append([]string{}, vals...), MatchFullRow)
	}
	nmd := arrow.NewMetadata(keys, vals)
	return arrow.NewSchema(s.Fields(), &nmd)
}

// DataFields returns the schema's fields without the reserved columns.
func DataFields(s *arrow.Schema) []arrow.Field {
	var out []arrow.Field
	for _, f := range s.Fields() {
		if !Reserved(f.Name) {
			out = append(out, f)
		}
	}
	return out
}

// Ops returns the op column of a change batch, checked: the column exists, is int8, and every row holds one
// of the four ops.
func Ops(rec arrow.RecordBatch) (*array.Int8, error) {
	idx := rec.Schema().FieldIndices(OpColumn)
	if len(idx) != 1 {
		return nil, fmt.Errorf("change batch has no %s column", OpColumn)
	}
	col, ok := rec.Column(idx[0]).(*array.Int8)
	if !ok {
		return nil, fmt.Errorf("change batch column %s is %s, want int8", OpColumn, rec.Column(idx[0]).DataType())
	}
	// A null or unknown op is a source's bug, refused here instead of being read as a snapshot row.
	vals := col.Int8Values()
	for i := range vals {
		if col.IsNull(i) {
			return nil, fault.DataErr(fmt.Errorf("row %d: %s is null", i, OpColumn),
				"the source must set "+OpColumn+" on every row (0 read, 1 insert, 2 update, 3 delete)")
		}
		if op := Op(vals[i]); op < OpRead || op > OpDelete {
			return nil, fault.DataErr(fmt.Errorf("row %d: %s is %d, not an op", i, OpColumn, vals[i]),
				"the source must set "+OpColumn+" to 0 (read), 1 (insert), 2 (update) or 3 (delete)")
		}
	}
	return col, nil
}

// Committed returns the commit-time column of a change batch, nil when the batch has none (every row's time
// is then unknown). A column of another type is the source's bug, refused.
func Committed(rec arrow.RecordBatch) (*array.Timestamp, error) {
	idx := rec.Schema().FieldIndices(CommittedColumn)
	if len(idx) == 0 {
		return nil, nil
	}
	col, ok := rec.Column(idx[0]).(*array.Timestamp)
	if !ok || !arrow.TypeEqual(col.DataType(), CommittedField.Type) {
		return nil, fault.DataErr(fmt.Errorf("change batch column %s is %s, want %s", CommittedColumn, rec.Column(idx[0]).DataType(), CommittedField.Type),
			"the source must declare "+CommittedColumn+" as change.CommittedField")
	}
	return col, nil
}

// CommittedAt is row i's commit time from col (as Committed returns it), false when unknown.
func CommittedAt(col *array.Timestamp, i int) (time.Time, bool) {
	if col == nil || col.IsNull(i) {
		return time.Time{}, false
	}
	return time.UnixMicro(int64(col.Value(i))).UTC(), true
}

// StripReserved returns the batch without the reserved columns. The caller releases the result.
func StripReserved(rec arrow.RecordBatch) arrow.RecordBatch {
	var (
		fields []arrow.Field
		cols   []arrow.Array
	)
	for i, f := range rec.Schema().Fields() {
		if Reserved(f.Name) {
			continue
		}
		fields = append(fields, f)
		cols = append(cols, rec.Column(i))
	}
	md := rec.Schema().Metadata()
	return array.NewRecordBatch(arrow.NewSchema(fields, &md), cols, rec.NumRows())
}

// Builder accumulates change rows of one schema. Append the data columns through Field, then call Row.
type Builder struct {
	b         *array.RecordBuilder
	op        *array.Int8Builder
	pos       *array.StringBuilder
	committed *array.TimestampBuilder // nil: the schema has no commit-time column
	schema    *arrow.Schema
}

// NewBuilder makes a builder for a schema made by Schema (or one whose data fields are followed by OpField,
// PosField and optionally CommittedField).
func NewBuilder(mem memory.Allocator, s *arrow.Schema) *Builder {
	b := array.NewRecordBuilder(mem, s)
	out := &Builder{b: b, schema: s}
	for i, f := range s.Fields() {
		switch f.Name {
		case OpColumn:
			out.op = b.Field(i).(*array.Int8Builder)
		case PosColumn:
			out.pos = b.Field(i).(*array.StringBuilder)
		case CommittedColumn:
			out.committed = b.Field(i).(*array.TimestampBuilder)
		}
	}
	return out
}

// Field returns the builder of data column i.
func (b *Builder) Field(i int) array.Builder { return b.b.Field(i) }

// Row records the op and position of the row whose data columns were just appended; its commit time is
// unknown (null).
func (b *Builder) Row(op Op, pos string) { b.RowAt(op, pos, time.Time{}) }

// RowAt is Row with the time the source committed the change (the zero time: unknown).
func (b *Builder) RowAt(op Op, pos string, committed time.Time) {
	b.op.Append(int8(op))
	if pos == "" {
		b.pos.AppendNull()
	} else {
		b.pos.Append(pos)
	}
	if b.committed != nil {
		if committed.IsZero() {
			b.committed.AppendNull()
		} else {
			b.committed.Append(arrow.Timestamp(committed.UnixMicro()))
		}
	}
}

// Reserve makes room for n more rows in every column's fixed-width buffers, so a batch of known size is not
// built by repeated doubling and copying.
func (b *Builder) Reserve(n int) { b.b.Reserve(n) }

// Len is the number of rows so far.
func (b *Builder) Len() int { return b.op.Len() }

// NewBatch returns the rows so far and resets the builder. The caller releases the batch.
func (b *Builder) NewBatch() arrow.RecordBatch { return b.b.NewRecordBatch() }

// Release frees the builder.
func (b *Builder) Release() { b.b.Release() }
