package source

import (
	"fmt"
	"math"

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
// It exists for speed. A RecordBuilder driven by appendValue cost, per cell, a type switch on the kind and
// one on the builder, the builder's capacity check and validity bit, and for text BinaryBuilder's offset
// closure; with 8M rows of the bench table that was 39% of the plugin's CPU during a snapshot. Here each
// column's way is chosen once per batch, and the common kinds are written straight into the Arrow buffers
// of the batch: a fixed-width value is one store at the row's index (the batch reserves its rows up front),
// text is copied after the previous value with its end offset, a null is noted and the validity bitmap is
// made at the batch's end (most batches have none). The values are read by the functions appendValue
// uses, and the other kinds go to appendValue itself, so a value is the same either way
// (TestRowBatchMatchesAppendValue compares the two on edge and random values of every kind). Measured on
// 2026-12-04: BenchmarkAppendRow 107 -> 58 ns/row; the bench's snapshot (4M rows) 0.36-0.39 -> 0.30-0.34
// plugin CPU µs/row.
//
// After appendRow returns an error the batch holds a partial row: Release it.
type rowBatch struct {
	schema   *arrow.Schema
	mem      memory.Allocator
	zeroNull bool
	cols     []batchColumn

	n    int // rows appended since the last record
	room int // rows every column holds without growing (n <= room)

	op         fixedColumn[int8]
	where      *array.StringBuilder
	nullWheres int // null positions not yet appended to where (a row with one appends them first)
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
	howFloat32
	howFloat64
	howDecimal128
	howDate
	howTimestamp // datetime and timestamp
	howText      // char, varchar, text and json: checked as UTF-8
	howRaw       // enum and set (the snapshot reads their names), binary: as they are
)

// batchColumn is one table column of a rowBatch: exactly one of b, fixed and text is set.
type batchColumn struct {
	how   cellHow
	col   *Column
	b     array.Builder // howValue
	fixed columnBuffer  // a *fixedColumn[T] of the Arrow type's T, for howInt8 to howTimestamp
	text  *textColumn   // howText, howRaw
}

// columnBuffer is a column whose buffers rowBatch writes itself.
type columnBuffer interface {
	reserve(rows int)
	null(row int)
	finish(rows int) arrow.Array
	release()
}

// newBatch starts a batch of t's rows.
func (r *reader) newBatch(t *Table) *rowBatch {
	return newRowBatch(r.mem, t, r.cfg.ZeroDate == config.ZeroDateNull)
}

func newRowBatch(mem memory.Allocator, t *Table, zeroNull bool) *rowBatch {
	rb := &rowBatch{mem: mem, schema: t.Schema, zeroNull: zeroNull, cols: make([]batchColumn, len(t.Columns))}
	for i := range t.Columns {
		col := &t.Columns[i]
		dt := t.Schema.Field(i).Type
		c := batchColumn{how: howOf(col.Kind), col: col}
		switch c.how {
		case howInt8:
			c.fixed = newFixed[int8](mem, dt)
		case howInt16:
			c.fixed = newFixed[int16](mem, dt)
		case howInt32:
			c.fixed = newFixed[int32](mem, dt)
		case howInt64:
			c.fixed = newFixed[int64](mem, dt)
		case howUint8:
			c.fixed = newFixed[uint8](mem, dt)
		case howUint16:
			c.fixed = newFixed[uint16](mem, dt)
		case howUint32:
			c.fixed = newFixed[uint32](mem, dt)
		case howUint64:
			c.fixed = newFixed[uint64](mem, dt)
		case howFloat32:
			c.fixed = newFixed[float32](mem, dt)
		case howFloat64:
			c.fixed = newFixed[float64](mem, dt)
		case howDecimal128:
			c.fixed = newFixed[decimal128.Num](mem, dt)
		case howDate:
			c.fixed = newFixed[arrow.Date32](mem, dt)
		case howTimestamp:
			c.fixed = newFixed[arrow.Timestamp](mem, dt)
		case howText, howRaw:
			c.text = &textColumn{mem: mem, dtype: dt}
		default:
			c.b = array.NewBuilder(mem, dt)
		}
		rb.cols[i] = c
	}
	rb.op = fixedColumn[int8]{mem: mem, dtype: change.OpField.Type}
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
	case KindFloat32:
		return howFloat32
	case KindFloat64:
		return howFloat64
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
	at := rb.n
	for i := range rb.cols {
		c := &rb.cols[i]
		v := row[i]
		if v == nil {
			switch {
			case c.fixed != nil:
				c.fixed.null(at)
			case c.text != nil:
				c.text.null(at)
			default:
				c.b.AppendNull()
			}
			continue
		}
		switch c.how {
		case howInt8, howInt16, howInt32, howInt64:
			n, ok := shortInt(v)
			if !ok {
				var err error
				if n, err = intValue(c.col, v); err != nil {
					return err
				}
			}
			switch c.how {
			case howInt8:
				c.fixed.(*fixedColumn[int8]).vals[at] = int8(n)
			case howInt16:
				c.fixed.(*fixedColumn[int16]).vals[at] = int16(n)
			case howInt32:
				c.fixed.(*fixedColumn[int32]).vals[at] = int32(n)
			default:
				c.fixed.(*fixedColumn[int64]).vals[at] = n
			}
		case howUint8, howUint16, howUint32, howUint64:
			n, err := uintValue(c.col, v)
			if err != nil {
				return err
			}
			switch c.how {
			case howUint8:
				c.fixed.(*fixedColumn[uint8]).vals[at] = uint8(n)
			case howUint16:
				c.fixed.(*fixedColumn[uint16]).vals[at] = uint16(n)
			case howUint32:
				c.fixed.(*fixedColumn[uint32]).vals[at] = uint32(n)
			default:
				c.fixed.(*fixedColumn[uint64]).vals[at] = n
			}
		case howFloat32:
			f, err := floatValue(c.col, v, 32)
			if err != nil {
				return err
			}
			c.fixed.(*fixedColumn[float32]).vals[at] = float32(f)
		case howFloat64:
			f, err := floatValue(c.col, v, 64)
			if err != nil {
				return err
			}
			c.fixed.(*fixedColumn[float64]).vals[at] = f
		case howDecimal128:
			n, ok := smallDecimal(v, c.col.Scale)
			if !ok {
				d, err := decimal128Value(c.col, v)
				if err != nil {
					return err
				}
				c.fixed.(*fixedColumn[decimal128.Num]).vals[at] = d
				continue
			}
			c.fixed.(*fixedColumn[decimal128.Num]).vals[at] = decimal128.FromI64(n)
		case howDate, howTimestamp:
			n, null, err := civilValue(c.col, v, rb.zeroNull)
			switch {
			case err != nil:
				return err
			case null:
				c.fixed.null(at)
			case c.how == howDate:
				c.fixed.(*fixedColumn[arrow.Date32]).vals[at] = arrow.Date32(n)
			default:
				c.fixed.(*fixedColumn[arrow.Timestamp]).vals[at] = arrow.Timestamp(n)
			}
		case howText:
			if !validUTF8(v) {
				return notUTF8(c.col, v)
			}
			if err := c.text.append(at, v); err != nil {
				return fmt.Errorf("column %s: %w", c.col.Name, err)
			}
		case howRaw:
			if err := c.text.append(at, v); err != nil {
				return fmt.Errorf("column %s: %w", c.col.Name, err)
			}
		default:
			if err := appendValue(c.b, c.col, v, false, rb.zeroNull); err != nil {
				return err
			}
		}
	}
	rb.op.vals[at] = int8(op)
	if where == "" {
		rb.nullWheres++
	} else {
		rb.where.AppendNulls(rb.nullWheres)
		rb.nullWheres = 0
		rb.where.Append(where)
	}
	rb.n++
	return nil
}

// Reserve makes room for n more rows.
func (rb *rowBatch) Reserve(n int) {
	rb.room = rb.n + n
	for _, c := range rb.cols {
		switch {
		case c.fixed != nil:
			c.fixed.reserve(rb.room)
		case c.text != nil:
			c.text.reserve(rb.room)
		default:
			c.b.Reserve(n)
		}
	}
	rb.op.reserve(rb.room)
}

// grow doubles the room (the snapshot reserves a whole batch up front; the re-snapshot's chunks grow).
func (rb *rowBatch) grow() {
	rb.Reserve(max(rb.n, 256))
}

// NewRecordBatch hands over the rows appended since the last call as a record and starts the next batch.
func (rb *rowBatch) NewRecordBatch() arrow.RecordBatch {
	cols := make([]arrow.Array, 0, len(rb.cols)+2)
	for _, c := range rb.cols {
		switch {
		case c.fixed != nil:
			cols = append(cols, c.fixed.finish(rb.n))
		case c.text != nil:
			cols = append(cols, c.text.finish(rb.n))
		default:
			cols = append(cols, c.b.NewArray())
		}
	}
	rb.where.AppendNulls(rb.nullWheres)
	cols = append(cols, rb.op.finish(rb.n), rb.where.NewArray())
	if rb.schema.NumFields() > len(cols) {
		// _skippr_committed_at: a row read by a snapshot is not a change and has no commit time (change).
		cols = append(cols, array.MakeArrayOfNull(rb.mem, change.CommittedField.Type, rb.n))
	}
	rec := array.NewRecordBatch(rb.schema, cols, int64(rb.n))
	for _, a := range cols {
		a.Release()
	}
	rb.n, rb.room, rb.nullWheres = 0, 0, 0
	return rec
}

// Release frees the builders and buffers (not a record already handed over).
func (rb *rowBatch) Release() {
	for _, c := range rb.cols {
		switch {
		case c.fixed != nil:
			c.fixed.release()
		case c.text != nil:
			c.text.release()
		default:
			c.b.Release()
		}
	}
	rb.op.release()
	rb.where.Release()
}

// fixedColumn is a fixed-width column's values buffer of one batch, written in place; nulls are noted and
// become the validity bitmap at the end (a null's slot stays zero).
type fixedColumn[T arrow.FixedWidthType] struct {
	mem   memory.Allocator
	dtype arrow.DataType
	buf   *memory.Buffer // nil before the batch's first reserve
	vals  []T            // buf's memory
	nulls []int          // null rows of the batch
}

func newFixed[T arrow.FixedWidthType](mem memory.Allocator, dtype arrow.DataType) *fixedColumn[T] {
	return &fixedColumn[T]{mem: mem, dtype: dtype}
}

func (f *fixedColumn[T]) reserve(rows int) {
	if rows <= len(f.vals) {
		return
	}
	if f.buf == nil {
		f.buf = memory.NewResizableBuffer(f.mem)
	}
	var zero T
	size := int(sizeOf(zero))
	f.buf.Reserve(rows * size)
	f.vals = arrow.GetData[T](f.buf.Buf()[:len(f.buf.Buf())/size*size])
}

func (f *fixedColumn[T]) null(row int) { f.nulls = append(f.nulls, row) }

func (f *fixedColumn[T]) finish(rows int) arrow.Array {
	f.reserve(max(rows, 1))
	var zero T
	f.buf.ResizeNoShrink(rows * int(sizeOf(zero)))
	a := makeArray(f.mem, f.dtype, rows, f.nulls, f.buf, nil)
	f.release()
	return a
}

// release drops this batch's buffer (an array made of it keeps its own reference).
func (f *fixedColumn[T]) release() {
	if f.buf != nil {
		f.buf.Release()
	}
	f.buf, f.vals, f.nulls = nil, nil, f.nulls[:0]
}

// sizeOf is the bytes of one value of a fixed-width type.
func sizeOf[T arrow.FixedWidthType](v T) uintptr { return uintptr(len(arrow.GetBytes([]T{v}))) }

// makeArray makes a column's array from its buffers (offsets nil for a fixed-width one), with a validity
// bitmap made of its null rows when it has any.
func makeArray(mem memory.Allocator, dtype arrow.DataType, rows int, nulls []int, values, offsets *memory.Buffer) arrow.Array {
	var valid *memory.Buffer
	if len(nulls) > 0 {
		valid = memory.NewResizableBuffer(mem)
		valid.Resize((rows + 7) / 8)
		bits := valid.Bytes()
		bitutil.SetBitsTo(bits, 0, int64(rows), true)
		for _, r := range nulls {
			bitutil.ClearBit(bits, r)
		}
		defer valid.Release()
	}
	bufs := []*memory.Buffer{valid, values}
	if offsets != nil {
		bufs = []*memory.Buffer{valid, offsets, values}
	}
	d := array.NewData(dtype, rows, bufs, nil, len(nulls), 0)
	defer d.Release()
	return array.MakeFromData(d)
}

// textColumn is a utf8 or binary column's value bytes and int32 offsets of one batch, written in place;
// nulls are noted as in fixedColumn. The values buffer starts at the previous batch's size.
type textColumn struct {
	mem   memory.Allocator
	dtype arrow.DataType

	values, offsets *memory.Buffer // nil before the batch's first reserve and value
	data            []byte         // values' memory
	size            int            // bytes of data used
	offs            []int32        // offsets' memory: value i ends at offs[i+1]
	nulls           []int
	last            int // the previous batch's size
}

func (t *textColumn) reserve(rows int) {
	if rows+1 <= len(t.offs) {
		return
	}
	if t.offsets == nil {
		t.offsets = memory.NewResizableBuffer(t.mem)
	}
	t.offsets.Reserve((rows + 1) * arrow.Int32SizeBytes)
	t.offs = arrow.Int32Traits.CastFromBytes(t.offsets.Buf())
	t.offs[0] = 0
}

// append appends row's value (copied: the reader may reuse its memory for the next row).
func (t *textColumn) append(row int, v []byte) error {
	end := t.size + len(v)
	if end > len(t.data) {
		if end > math.MaxInt32 {
			return fmt.Errorf("the batch's values exceed the 2 GiB an Arrow column holds (lower batch_size)")
		}
		t.growData(end)
	}
	copy(t.data[t.size:], v)
	t.size = end
	t.offs[row+1] = int32(end)
	return nil
}

func (t *textColumn) null(row int) {
	t.offs[row+1] = int32(t.size)
	t.nulls = append(t.nulls, row)
}

// growData makes room for at least end bytes of values: the previous batch's size at first, then twice as much.
func (t *textColumn) growData(end int) {
	if t.values == nil {
		t.values = memory.NewResizableBuffer(t.mem)
	}
	t.values.Reserve(min(max(end, 2*len(t.data), t.last), math.MaxInt32))
	t.data = t.values.Buf()
}

func (t *textColumn) finish(rows int) arrow.Array {
	t.reserve(rows) // an empty batch still has its one offset
	if t.values == nil {
		t.values = memory.NewResizableBuffer(t.mem)
	}
	t.offsets.ResizeNoShrink((rows + 1) * arrow.Int32SizeBytes)
	t.values.ResizeNoShrink(t.size)
	a := makeArray(t.mem, t.dtype, rows, t.nulls, t.values, t.offsets)
	t.last = t.size
	t.release()
	return a
}

// release drops this batch's buffers (an array made of them keeps its own references).
func (t *textColumn) release() {
	for _, b := range []*memory.Buffer{t.values, t.offsets} {
		if b != nil {
			b.Release()
		}
	}
	t.values, t.offsets, t.data, t.offs, t.size, t.nulls = nil, nil, nil, nil, 0, t.nulls[:0]
}
