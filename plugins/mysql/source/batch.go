package source

import (
	"fmt"
	"math"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugins/mysql/config"
)

// rowBatch is one batch of a table's snapshot rows on its way into Arrow: the snapshot and the re-snapshot
// append rows of text cells to it and take the record from NewRecordBatch, as they would from an
// array.RecordBuilder (Reserve, NewRecordBatch and Release mean the same).
//
// It exists for speed; appendValue stays the reference and takes every cell the cases here do not. Driving a
// RecordBuilder with appendValue per cell cost a type switch on the kind and one on the builder per cell, and
// BinaryBuilder.Append's per-call reserve and offset closure for every text cell; with 8M rows of the bench
// table that was 39% of the plugin's CPU during a snapshot. Here each column's case is chosen once per batch,
// fixed-width values go in with UnsafeAppend below the capacity reserved for the whole batch, text is copied
// straight into the Arrow buffers of its column (textColumn), and the op and (null) position columns are
// appended once per batch. TestRowBatchMatchesAppendValue compares it with appendValue on edge and random
// values of every kind.
//
// After appendRow returns an error the batch holds a partial row: Release it.
type rowBatch struct {
	schema   *arrow.Schema
	zeroNull bool
	cols     []batchColumn

	n    int // rows appended since the last record
	room int // rows the builders appended in place hold without growing (n <= room)

	op         *array.Int8Builder
	ops        []int8
	where      *array.StringBuilder
	nullWheres int // null positions not yet appended to where (a row with one appends them first)

	cells [][]byte // appendRow's row as cells, reused
}

// cellHow is how rowBatch appends a column's non-null value.
type cellHow uint8

const (
	howValue cellHow = iota // appendValue into the column's builder
	howInt8
	howInt16 // smallint and year
	howInt32
	howInt64
	howUint8
	howUint16
	howUint32
	howUint64
	howDecimal128
	howDate
	howTimestamp // datetime and timestamp
	howText      // char, varchar, text and json: UTF-8 checked, gathered in text
	howRaw       // enum and set (the snapshot reads their names), binary: gathered in text as they are
)

// batchColumn is one table column of a rowBatch.
type batchColumn struct {
	how  cellHow
	col  *Column
	b    array.Builder // the column's builder; nil for howText and howRaw
	text *textColumn   // for howText and howRaw
}

// newBatch starts a batch of t's rows.
func (r *reader) newBatch(t *Table) *rowBatch {
	return newRowBatch(r.mem, t, r.cfg.ZeroDate == config.ZeroDateNull)
}

func newRowBatch(mem memory.Allocator, t *Table, zeroNull bool) *rowBatch {
	rb := &rowBatch{schema: t.Schema, zeroNull: zeroNull, cols: make([]batchColumn, len(t.Columns))}
	for i := range t.Columns {
		col := &t.Columns[i]
		c := batchColumn{how: howOf(col.Kind), col: col}
		if c.how == howText || c.how == howRaw {
			c.text = &textColumn{mem: mem, dtype: t.Schema.Field(i).Type}
		} else {
			c.b = array.NewBuilder(mem, t.Schema.Field(i).Type)
		}
		rb.cols[i] = c
	}
	rb.op = array.NewInt8Builder(mem)
	rb.where = array.NewStringBuilder(mem)
	return rb
}

func howOf(k Kind) cellHow {
	switch k {
	case KindInt8:
		return howInt8
	case KindInt16, KindYear:
		return howInt16
	case KindInt32:
		return howInt32
	case KindInt64:
		return howInt64
	case KindUint8:
		return howUint8
	case KindUint16:
		return howUint16
	case KindUint32:
		return howUint32
	case KindUint64:
		return howUint64
	case KindDecimal128:
		return howDecimal128
	case KindDate:
		return howDate
	case KindDatetime, KindTimestamp:
		return howTimestamp
	case KindString, KindJSON:
		return howText
	case KindEnum, KindSet, KindBinary:
		return howRaw
	}
	return howValue
}

// appendRow appends one row: a text-protocol cell per column, nil for NULL (an empty value is not nil).
func (rb *rowBatch) appendRow(row [][]byte, op change.Op, where string) error {
	if rb.n >= rb.room {
		rb.grow()
	}
	for i := range rb.cols {
		c := &rb.cols[i]
		v := row[i]
		if v == nil {
			if c.text != nil {
				c.text.appendNull()
			} else {
				c.b.AppendNull()
			}
			continue
		}
		// Each case appends and continues, or breaks to appendValue for a form it does not read (which
		// then also gives the error a bad value deserves).
		switch c.how {
		case howInt8:
			if n, ok := shortInt(v); ok {
				c.b.(*array.Int8Builder).UnsafeAppend(int8(n))
				continue
			}
		case howInt16:
			if n, ok := shortInt(v); ok {
				c.b.(*array.Int16Builder).UnsafeAppend(int16(n))
				continue
			}
		case howInt32:
			if n, ok := shortInt(v); ok {
				c.b.(*array.Int32Builder).UnsafeAppend(int32(n))
				continue
			}
		case howInt64:
			if n, ok := shortInt(v); ok {
				c.b.(*array.Int64Builder).UnsafeAppend(n)
				continue
			}
		case howUint8:
			if n, ok := shortInt(v); ok && n >= 0 {
				c.b.(*array.Uint8Builder).UnsafeAppend(uint8(n))
				continue
			}
		case howUint16:
			if n, ok := shortInt(v); ok && n >= 0 {
				c.b.(*array.Uint16Builder).UnsafeAppend(uint16(n))
				continue
			}
		case howUint32:
			if n, ok := shortInt(v); ok && n >= 0 {
				c.b.(*array.Uint32Builder).UnsafeAppend(uint32(n))
				continue
			}
		case howUint64:
			if n, ok := shortInt(v); ok && n >= 0 {
				c.b.(*array.Uint64Builder).UnsafeAppend(uint64(n))
				continue
			}
		case howDecimal128:
			if n, ok := smallDecimal(v, c.col.Scale); ok {
				c.b.(*array.Decimal128Builder).UnsafeAppend(decimal128.FromI64(n))
				continue
			}
		case howDate:
			if days, us, ok := civilText(v); ok && us >= 0 {
				c.b.(*array.Date32Builder).UnsafeAppend(arrow.Date32(days))
				continue
			}
		case howTimestamp:
			if days, us, ok := civilText(v); ok && us >= 0 {
				c.b.(*array.TimestampBuilder).UnsafeAppend(arrow.Timestamp(days*86_400_000_000 + us))
				continue
			}
		case howText:
			if !utf8.Valid(v) {
				return notUTF8(c.col, v)
			}
			if err := c.text.append(v); err != nil {
				return fmt.Errorf("column %s: %w", c.col.Name, err)
			}
			continue
		case howRaw:
			if err := c.text.append(v); err != nil {
				return fmt.Errorf("column %s: %w", c.col.Name, err)
			}
			continue
		}
		if err := appendValue(c.b, c.col, v, false, rb.zeroNull); err != nil {
			return err
		}
	}
	rb.n++
	rb.ops = append(rb.ops, int8(op))
	if where == "" {
		rb.nullWheres++
	} else {
		rb.where.AppendNulls(rb.nullWheres)
		rb.nullWheres = 0
		rb.where.Append(where)
	}
	return nil
}

// Reserve makes room for n more rows in the columns appended in place.
func (rb *rowBatch) Reserve(n int) {
	for _, c := range rb.cols {
		if c.b != nil {
			c.b.Reserve(n)
		}
	}
	rb.room = rb.n + n
}

// grow doubles the room (the snapshot reserves a whole batch up front; the re-snapshot's chunks grow).
func (rb *rowBatch) grow() {
	rb.Reserve(max(rb.n, 256))
}

// NewRecordBatch hands over the rows appended since the last call as a record and starts the next batch.
func (rb *rowBatch) NewRecordBatch() arrow.RecordBatch {
	cols := make([]arrow.Array, 0, len(rb.cols)+2)
	for _, c := range rb.cols {
		if c.text != nil {
			cols = append(cols, c.text.finish())
		} else {
			cols = append(cols, c.b.NewArray())
		}
	}
	rb.op.AppendValues(rb.ops, nil)
	rb.where.AppendNulls(rb.nullWheres)
	cols = append(cols, rb.op.NewArray(), rb.where.NewArray())
	rec := array.NewRecordBatch(rb.schema, cols, int64(rb.n))
	for _, a := range cols {
		a.Release()
	}
	rb.n, rb.room, rb.ops, rb.nullWheres = 0, 0, rb.ops[:0], 0
	return rec
}

// Release frees the builders and buffers (not a record already handed over).
func (rb *rowBatch) Release() {
	for _, c := range rb.cols {
		if c.b != nil {
			c.b.Release()
		}
		if c.text != nil {
			c.text.release()
		}
	}
	rb.op.Release()
	rb.where.Release()
}

// textColumn builds a utf8 or binary column's Arrow buffers of one batch directly: the value bytes, int32
// offsets and, once a null comes, the validity bitmap. Each batch takes new buffers from the allocator (the
// record keeps the old ones); the values buffer starts at the previous batch's size.
type textColumn struct {
	mem   memory.Allocator
	dtype arrow.DataType

	values, offsets, valid *memory.Buffer // nil before the batch's first value
	data                   []byte         // values' memory
	size                   int            // bytes of data used
	offs                   []int32        // offsets' memory; offs[0..n] used
	bits                   []byte         // valid's memory, nil while the batch has no null
	n, nulls               int
	last                   int // the previous batch's size
}

// append appends a value (copied: the reader may reuse its memory for the next row).
func (t *textColumn) append(v []byte) error {
	if t.n+1 >= len(t.offs) {
		t.growRows()
	}
	end := t.size + len(v)
	if end > len(t.data) {
		if end > math.MaxInt32 {
			return fmt.Errorf("the batch's values exceed the 2 GiB an Arrow column holds (lower batch_size)")
		}
		t.growData(end)
	}
	copy(t.data[t.size:], v)
	t.size = end
	if t.bits != nil {
		bitutil.SetBit(t.bits, t.n)
	}
	t.n++
	t.offs[t.n] = int32(end)
	return nil
}

func (t *textColumn) appendNull() {
	if t.n+1 >= len(t.offs) {
		t.growRows()
	}
	if t.bits == nil {
		t.valid = memory.NewResizableBuffer(t.mem)
		t.valid.Reserve((len(t.offs) + 7) / 8)
		t.bits = t.valid.Buf()
		bitutil.SetBitsTo(t.bits, 0, int64(t.n), true)
	}
	bitutil.ClearBit(t.bits, t.n)
	t.n++
	t.offs[t.n] = int32(t.size)
	t.nulls++
}

// growRows makes room for at least twice the rows (256 at first) in the offsets and the bitmap.
func (t *textColumn) growRows() {
	rows := max(2*t.n, 256)
	if t.offsets == nil {
		t.offsets = memory.NewResizableBuffer(t.mem)
	}
	t.offsets.Reserve((rows + 1) * arrow.Int32SizeBytes)
	t.offs = arrow.Int32Traits.CastFromBytes(t.offsets.Buf())
	if t.valid != nil {
		t.valid.Reserve((len(t.offs) + 7) / 8)
		t.bits = t.valid.Buf()
	}
}

// growData makes room for at least end bytes of values: the previous batch's size at first, then twice as much.
func (t *textColumn) growData(end int) {
	if t.values == nil {
		t.values = memory.NewResizableBuffer(t.mem)
	}
	t.values.Reserve(min(max(end, 2*len(t.data), t.last), math.MaxInt32))
	t.data = t.values.Buf()
}

// finish makes the batch's array and starts the next batch.
func (t *textColumn) finish() arrow.Array {
	if t.offsets == nil {
		t.growRows() // an empty batch still has its one offset
	}
	if t.values == nil {
		t.values = memory.NewResizableBuffer(t.mem)
	}
	t.offsets.ResizeNoShrink((t.n + 1) * arrow.Int32SizeBytes)
	t.values.ResizeNoShrink(t.size)
	var valid *memory.Buffer
	if t.nulls > 0 {
		t.valid.ResizeNoShrink((t.n + 7) / 8)
		valid = t.valid
	}
	d := array.NewData(t.dtype, t.n, []*memory.Buffer{valid, t.offsets, t.values}, nil, t.nulls, 0)
	a := array.MakeFromData(d)
	d.Release()
	t.last = t.size
	t.release()
	return a
}

// release drops this batch's buffers (the array made of them keeps its own references).
func (t *textColumn) release() {
	for _, b := range []*memory.Buffer{t.values, t.offsets, t.valid} {
		if b != nil {
			b.Release()
		}
	}
	*t = textColumn{mem: t.mem, dtype: t.dtype, last: t.last}
}
