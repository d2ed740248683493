package dest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/rowmeta"
	"github.com/skippr-dev/skippr/plugin-sdk/values"
	"github.com/skippr-dev/skippr/plugins/snowflake/sfsql"
)

// pick is a surviving row of a batch and its op, with what the extra staged columns (extra) hold for it.
type pick struct {
	row int
	op  change.Op
	// keyOnly: a delete whose row's values the apply never saw (soft_delete writes only the flag).
	keyOnly bool
	// pos is the WAL entry of the row's newest change, committed its source commit time (zero: unknown), seq
	// its place among the stream's changes of that entry (history only).
	pos       uint64
	committed time.Time
	seq       int64
}

// part is the picked rows of one batch.
type part struct {
	rec   arrow.RecordBatch
	picks []pick
}

// extra is a staged column beyond the data and the op: a value of each picked row that the metadata columns
// (rowmeta) or a history table take.
type extra int

const (
	extraDeleted   extra = iota // the soft-delete flag: the op is a delete
	extraKeyOnly                // pick.keyOnly
	extraCommitted              // pick.committed, NULL when unknown
	extraOpName                 // the op's _skippr_op text
	extraPosition               // pick.pos
	extraSeq                    // pick.seq
)

// column is the extra's column in the staging table.
func (e extra) column() sfsql.Column {
	switch e {
	case extraDeleted:
		return sfsql.Column{Name: sfsql.DeletedColumn, Type: sfsql.Type{Base: "BOOLEAN"}}
	case extraKeyOnly:
		return sfsql.Column{Name: sfsql.KeyOnlyColumn, Type: sfsql.Type{Base: "BOOLEAN"}}
	case extraCommitted:
		return sfsql.Column{Name: sfsql.SourceCommittedAtColumn, Type: sfsql.Type{Base: "TIMESTAMP_TZ"}}
	case extraOpName:
		return sfsql.Column{Name: sfsql.OpNameColumn, Type: sfsql.Type{Base: "TEXT"}}
	case extraPosition:
		return sfsql.Column{Name: sfsql.PositionColumn, Type: sfsql.Type{Base: "NUMBER", Precision: 20, Scale: 0}}
	}
	return sfsql.Column{Name: sfsql.SeqColumn, Type: sfsql.Type{Base: "NUMBER", Precision: 10, Scale: 0}}
}

func extraColumns(extras []extra) []sfsql.Column {
	out := make([]sfsql.Column, len(extras))
	for i, e := range extras {
		out[i] = e.column()
	}
	return out
}

// field is the extra's Parquet column.
func (e extra) field() arrow.Field {
	t := map[extra]arrow.DataType{
		extraDeleted: arrow.FixedWidthTypes.Boolean, extraKeyOnly: arrow.FixedWidthTypes.Boolean,
		extraCommitted: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"},
		extraOpName:    arrow.BinaryTypes.String, extraPosition: arrow.PrimitiveTypes.Int64, extraSeq: arrow.PrimitiveTypes.Int64,
	}[e]
	return arrow.Field{Name: e.column().Name, Type: t, Nullable: e == extraCommitted}
}

// values builds the extra's column of picks.
func (e extra) values(mem memory.Allocator, picks []pick) arrow.Array {
	b := array.NewBuilder(mem, e.field().Type)
	defer b.Release()
	for _, p := range picks {
		switch e {
		case extraDeleted:
			b.(*array.BooleanBuilder).Append(p.op == change.OpDelete)
		case extraKeyOnly:
			b.(*array.BooleanBuilder).Append(p.keyOnly)
		case extraCommitted:
			if p.committed.IsZero() {
				b.AppendNull()
			} else {
				b.(*array.TimestampBuilder).Append(arrow.Timestamp(p.committed.UnixMicro()))
			}
		case extraOpName:
			b.(*array.StringBuilder).Append(rowmeta.OpName(p.op))
		case extraPosition:
			b.(*array.Int64Builder).Append(int64(p.pos))
		case extraSeq:
			b.(*array.Int64Builder).Append(p.seq)
		}
	}
	return b.NewArray()
}

// StageSchema is the Arrow schema of the Parquet file of a batch schema's data columns: the Snowflake column
// names, each type as Snowflake loads it (nested values as JSON text, unsigned integers signed or decimal),
// the op, and the extras.
func StageSchema(cols []sfsql.Column, src *arrow.Schema, extras ...extra) *arrow.Schema {
	data := change.DataFields(src)
	fields := make([]arrow.Field, 0, len(cols)+1+len(extras))
	for i, c := range cols {
		fields = append(fields, arrow.Field{Name: c.Name, Type: stageType(data[i].Type, c.Type), Nullable: true})
	}
	fields = append(fields, arrow.Field{Name: sfsql.OpColumn, Type: arrow.PrimitiveTypes.Int8})
	for _, e := range extras {
		fields = append(fields, e.field())
	}
	return arrow.NewSchema(fields, nil)
}

func stageType(dt arrow.DataType, t sfsql.Type) arrow.DataType {
	if t.Nested() {
		return arrow.BinaryTypes.String
	}
	if e, ok := dt.(arrow.ExtensionType); ok { // staged as its storage (sfsql.Of), e.g. a uuid as plain binary
		return stageType(e.StorageType(), t)
	}
	switch dt.ID() {
	case arrow.NULL:
		return arrow.BinaryTypes.String
	case arrow.UINT8, arrow.UINT16, arrow.UINT32:
		return arrow.PrimitiveTypes.Int64
	case arrow.UINT64:
		return &arrow.Decimal128Type{Precision: 38, Scale: 0}
	case arrow.FLOAT16:
		return arrow.PrimitiveTypes.Float32
	case arrow.DECIMAL128:
		if d := dt.(*arrow.Decimal128Type); int(d.Scale) > t.Scale {
			return &arrow.Decimal128Type{Precision: d.Precision, Scale: int32(t.Scale)}
		}
	}
	return dt
}

// StageRecord converts the picked rows of a batch into a record of StageSchema. The caller releases it.
func StageRecord(ctx context.Context, mem memory.Allocator, schema *arrow.Schema, cols []sfsql.Column, p part, extras ...extra) (arrow.RecordBatch, error) {
	ib := array.NewInt64Builder(mem)
	ob := array.NewInt8Builder(mem)
	for _, pk := range p.picks {
		ib.Append(int64(pk.row))
		ob.Append(int8(pk.op))
	}
	idx := ib.NewArray()
	defer idx.Release()
	ops := ob.NewArray()
	defer ops.Release()
	ib.Release()
	ob.Release()
	ctx = compute.WithAllocator(ctx, mem)
	var arrays []arrow.Array
	defer func() {
		for _, a := range arrays {
			a.Release()
		}
	}()
	j := 0
	for i, f := range p.rec.Schema().Fields() {
		if change.Reserved(f.Name) {
			continue
		}
		c := cols[j]
		want := schema.Field(j).Type
		j++
		taken, err := compute.TakeArray(ctx, p.rec.Column(i), idx)
		if err != nil {
			return nil, fmt.Errorf("column %s: take rows: %w", f.Name, err)
		}
		conv, err := convert(mem, taken, c.Type, want)
		taken.Release()
		if err != nil {
			return nil, fmt.Errorf("column %s: %w", f.Name, err)
		}
		arrays = append(arrays, conv)
	}
	ops.Retain()
	arrays = append(arrays, ops)
	for _, e := range extras {
		arrays = append(arrays, e.values(mem, p.picks))
	}
	rec := array.NewRecordBatch(schema, arrays, int64(len(p.picks)))
	return rec, nil
}

// convert makes a taken column the staged type. The result is a new reference.
func convert(mem memory.Allocator, a arrow.Array, t sfsql.Type, want arrow.DataType) (arrow.Array, error) {
	if t.Nested() {
		b := array.NewStringBuilder(mem)
		defer b.Release()
		if e, ok := a.(array.ExtensionArray); ok && sfsql.IsJSON(a.DataType()) {
			s, ok := e.Storage().(*array.String)
			if ok {
				for i := 0; i < s.Len(); i++ {
					if s.IsNull(i) {
						b.AppendNull()
					} else {
						b.Append(s.Value(i))
					}
				}
				return b.NewArray(), nil
			}
		}
		for i := 0; i < a.Len(); i++ {
			if a.IsNull(i) {
				b.AppendNull()
				continue
			}
			v, err := jsonValue(a, i)
			if err != nil {
				return nil, fmt.Errorf("row %d: %w", i, err)
			}
			j, err := json.Marshal(v)
			if err != nil {
				return nil, fmt.Errorf("row %d as JSON: %w", i, err)
			}
			b.Append(string(j))
		}
		return b.NewArray(), nil
	}
	if e, ok := a.(array.ExtensionArray); ok { // staged as its storage (stageType)
		return convert(mem, e.Storage(), t, want)
	}
	switch src := a.(type) {
	case *array.Date32:
		for i := 0; i < src.Len(); i++ {
			if d := int64(src.Value(i)); src.IsValid(i) && (d < minDay || d > maxDay) {
				return nil, outOfRange(i, "date", dayText(src.Value(i)))
			}
		}
	case *array.Timestamp:
		unit := src.DataType().(*arrow.TimestampType).Unit
		lo, hi := minMicros/microsPer(unit), maxMicros/microsPer(unit)
		if unit == arrow.Nanosecond {
			lo, hi = math.MinInt64, math.MaxInt64 // timestamp[ns] spans 1677–2262: always inside
		}
		for i := 0; i < src.Len(); i++ {
			if v := src.Value(i); src.IsValid(i) && (int64(v) < lo || int64(v) > hi) {
				return nil, outOfRange(i, "timestamp", timestampText(v, unit))
			}
		}
	case *array.Time32, *array.Time64:
		for i := 0; i < a.Len(); i++ {
			if a.IsValid(i) {
				if err := timeInDay(i, a); err != nil {
					return nil, err
				}
			}
		}
	case *array.Null:
		b := array.NewStringBuilder(mem)
		defer b.Release()
		b.AppendNulls(src.Len())
		return b.NewArray(), nil
	case *array.Uint8, *array.Uint16, *array.Uint32:
		b := array.NewInt64Builder(mem)
		defer b.Release()
		for i := 0; i < a.Len(); i++ {
			if a.IsNull(i) {
				b.AppendNull()
				continue
			}
			switch v := src.(type) {
			case *array.Uint8:
				b.Append(int64(v.Value(i)))
			case *array.Uint16:
				b.Append(int64(v.Value(i)))
			case *array.Uint32:
				b.Append(int64(v.Value(i)))
			}
		}
		return b.NewArray(), nil
	case *array.Uint64:
		b := array.NewDecimal128Builder(mem, want.(*arrow.Decimal128Type))
		defer b.Release()
		for i := 0; i < a.Len(); i++ {
			if a.IsNull(i) {
				b.AppendNull()
			} else {
				b.Append(decimal128.FromU64(src.Value(i)))
			}
		}
		return b.NewArray(), nil
	case *array.Decimal128:
		have, ok := want.(*arrow.Decimal128Type)
		scale := src.DataType().(*arrow.Decimal128Type).Scale
		if !ok || have.Scale == scale {
			break
		}
		// A scale past Snowflake's (decimal(38,38) into NUMBER(38,37)): exact only when the dropped digits are 0.
		b := array.NewDecimal128Builder(mem, have)
		defer b.Release()
		div := decimal128.GetScaleMultiplier(int(scale - have.Scale))
		for i := 0; i < a.Len(); i++ {
			if a.IsNull(i) {
				b.AppendNull()
				continue
			}
			q, r := src.Value(i).Div(div)
			if r != (decimal128.Num{}) {
				return nil, fault.DataErr(fmt.Errorf("row %d: %s has %d decimals; Snowflake's NUMBER holds at most %d", i, src.Value(i).ToString(scale), scale, have.Scale),
					fmt.Sprintf("round the column to %d decimals in the source (for example numeric(38,%d)), or replicate the table to a destination that holds it", have.Scale, have.Scale))
			}
			b.Append(q)
		}
		return b.NewArray(), nil
	case *array.Float16:
		b := array.NewFloat32Builder(mem)
		defer b.Release()
		for i := 0; i < a.Len(); i++ {
			if a.IsNull(i) {
				b.AppendNull()
			} else {
				b.Append(src.Value(i).Float32())
			}
		}
		return b.NewArray(), nil
	}
	a.Retain()
	return a, nil
}

// countingWriter counts the bytes of the file.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// WriterProperties are the Parquet settings of staged files: Snappy, which Snowflake reads natively, and
// statistics off (nothing reads them: the file is loaded whole and purged).
func WriterProperties() (*parquet.WriterProperties, pqarrow.ArrowWriterProperties) {
	return parquet.NewWriterProperties(parquet.WithCompression(compress.Codecs.Snappy), parquet.WithStats(false)),
		pqarrow.NewArrowWriterProperties()
}

// writeParquet writes the parts as one Parquet file at path; it returns the rows and bytes written.
func writeParquet(ctx context.Context, path string, src *arrow.Schema, cols []sfsql.Column, parts []part, extras []extra) (int64, int64, error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	cw := &countingWriter{w: f}
	n, err := EncodeParquet(ctx, cw, src, cols, parts, extras...)
	if err != nil {
		return 0, 0, err
	}
	if err := f.Close(); err != nil {
		return 0, 0, err
	}
	return n, cw.n, nil
}

// EncodeParquet writes the picked rows of parts (batches of schema src) to w as Parquet; it returns the rows.
func EncodeParquet(ctx context.Context, w io.Writer, src *arrow.Schema, cols []sfsql.Column, parts []part, extras ...extra) (int64, error) {
	mem := memory.DefaultAllocator
	schema := StageSchema(cols, src, extras...)
	props, aprops := WriterProperties()
	fw, err := pqarrow.NewFileWriter(schema, w, props, aprops)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, p := range parts {
		rec, err := StageRecord(ctx, mem, schema, cols, p, extras...)
		if err != nil {
			fw.Close()
			return 0, err
		}
		err = fw.Write(rec)
		n += rec.NumRows()
		rec.Release()
		if err != nil {
			fw.Close()
			return 0, err
		}
	}
	return n, fw.Close()
}

// Snowflake's DATE and TIMESTAMP hold years 1 to 9999 and nothing infinite; the ±infinity sources carry (as
// DuckDB keeps it, plugin-sdk/values) and later years would be loaded as other instants or refused by COPY.
const (
	minDay    = -719162                // 0001-01-01
	maxDay    = 2932896                // 9999-12-31
	minMicros = -62135596800000000     // 0001-01-01 00:00:00
	maxMicros = 253402300800000000 - 1 // 9999-12-31 23:59:59.999999
)

func microsPer(u arrow.TimeUnit) int64 {
	switch u {
	case arrow.Second:
		return 1e6
	case arrow.Millisecond:
		return 1e3
	}
	return 1
}

// outOfRange is the data error for row i's value: the pipeline stops in state failed naming it (StageRecord
// adds the column), instead of a COPY the warehouse refuses on every retry.
func outOfRange(row int, kind, value string) error {
	return fault.DataErr(fmt.Errorf("row %d: %s %s is outside Snowflake's range (years 1 to 9999, nothing infinite)", row, kind, value),
		"Snowflake cannot hold it: change the value in the source (for example UPDATE … SET col = NULL WHERE col = 'infinity'), or replicate the table to a destination that holds it (Postgres, DuckDB, Iceberg)")
}

// timeInDay refuses row i of a time column past the day: PostgreSQL's time takes 24:00:00, Snowflake's TIME
// ends at 23:59:59.999999999, and the value would otherwise load as something else or not at all.
func timeInDay(row int, a arrow.Array) error {
	var ns int64
	switch x := a.(type) {
	case *array.Time32:
		ns = int64(x.Value(row)) * microsPer(x.DataType().(*arrow.Time32Type).Unit) * 1000
	case *array.Time64:
		ns = int64(x.Value(row))
		if x.DataType().(*arrow.Time64Type).Unit == arrow.Microsecond {
			ns *= 1000
		}
	}
	if ns >= 0 && ns < 86400e9 {
		return nil
	}
	return fault.DataErr(fmt.Errorf("row %d: time %02d:%02d:%02d.%09d is outside Snowflake's TIME range (00:00:00 to 23:59:59.999999999)",
		row, ns/3600e9, ns/60e9%60, ns/1e9%60, ns%1e9),
		"Snowflake cannot hold it: change the value in the source (for example UPDATE … SET col = '23:59:59.999999' WHERE col = '24:00:00'), or replicate the table to a destination that holds it (Postgres, DuckDB, Iceberg)")
}

func dayText(d arrow.Date32) string {
	switch d {
	case values.DateInfinity:
		return "infinity"
	case values.DateNegInfinity:
		return "-infinity"
	}
	return strconv.FormatInt(int64(d), 10) + " days since 1970-01-01"
}

func timestampText(v arrow.Timestamp, u arrow.TimeUnit) string {
	if u == arrow.Microsecond {
		switch v {
		case values.TimestampInfinity:
			return "infinity"
		case values.TimestampNegInfinity:
			return "-infinity"
		}
	}
	return strconv.FormatInt(int64(v), 10) + " " + u.String() + " since 1970-01-01"
}

// jsonValue is row i of a nested array as the JSON the OBJECT or ARRAY column takes: a map is an object keyed
// by its keys (Arrow's own marshalling makes it a list of {"key", "value"} pairs, which TO_OBJECT refuses as an
// array), at any depth; other values as Arrow marshals them.
func jsonValue(a arrow.Array, i int) (any, error) {
	if a.IsNull(i) {
		return nil, nil
	}
	switch v := a.(type) {
	case *array.Map:
		keys, items := v.Keys(), v.Items()
		start, end := v.ValueOffsets(i)
		obj := make(map[string]any, end-start)
		for j := int(start); j < int(end); j++ {
			k := keys.ValueStr(j)
			if _, dup := obj[k]; dup {
				return nil, fault.DataErr(fmt.Errorf("map key %q appears twice; a Snowflake OBJECT holds each key once", k),
					"make the map's keys unique in the source, or leave the column out")
			}
			val, err := jsonValue(items, j)
			if err != nil {
				return nil, err
			}
			obj[k] = val
		}
		return obj, nil
	case *array.Struct:
		st := v.DataType().(*arrow.StructType)
		obj := make(map[string]any, v.NumField())
		for f := 0; f < v.NumField(); f++ {
			val, err := jsonValue(v.Field(f), i)
			if err != nil {
				return nil, err
			}
			obj[st.Field(f).Name] = val
		}
		return obj, nil
	case array.ListLike:
		start, end := v.ValueOffsets(i)
		list := make([]any, 0, end-start)
		for j := int(start); j < int(end); j++ {
			val, err := jsonValue(v.ListValues(), j)
			if err != nil {
				return nil, err
			}
			list = append(list, val)
		}
		return list, nil
	}
	return a.GetOneForMarshal(i), nil
}
