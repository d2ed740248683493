package lake

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
)

// opBatch is a batch conformed to the table schema with the ops of its rows.
type opBatch struct {
	rec arrow.RecordBatch
	ops []change.Op
}

// folded is what one apply leaves of a table's changes: the rows to add and the keys whose earlier versions
// must go. Within an apply each key keeps only its last op, so a key has at most one surviving version.
type folded struct {
	data    []arrow.RecordBatch // rows to append, in the table schema
	deletes []arrow.RecordBatch // key columns of the keys to equality-delete
	rows    int64               // change rows folded
}

func (f *folded) release() {
	for _, r := range f.data {
		r.Release()
	}
	for _, r := range f.deletes {
		r.Release()
	}
	f.data, f.deletes = nil, nil
}

// slot is where a key's last version sits.
type slot struct {
	batch, row int
	op         change.Op
	// del: some op on this key in this apply replaces or removes an earlier version.
	del bool
}

// fold collapses the batches by key. keyIdx are the key columns' indices in the table schema, keySchema the
// Arrow schema of those columns (with their field ids). Without a key every row is appended, and an update or
// delete is an error because nothing identifies the row it changes.
func fold(ctx context.Context, mem memory.Allocator, batches []opBatch, keyIdx []int, keySchema *arrow.Schema, upsertInserts bool, what string) (*folded, error) {
	out := &folded{}
	if len(keyIdx) == 0 {
		for _, b := range batches {
			for i, op := range b.ops {
				if op == change.OpUpdate || op == change.OpDelete {
					return nil, fmt.Errorf("%s: row %d is an %s, but the stream has no primary key to find the row by", what, i, op)
				}
			}
			b.rec.Retain()
			out.data = append(out.data, b.rec)
			out.rows += b.rec.NumRows()
		}
		return out, nil
	}
	// Keys index slots, which are kept in first-seen order so that the output is deterministic. The maps are
	// sized for every row up front: growing a map of a million keys rehashed it about as long as the Parquet
	// writer ran (BENCHMARKS.md). A single integer key, the common case, is hashed as an int64 rather than as
	// an encoded string.
	total := 0
	for _, b := range batches {
		total += len(b.ops)
	}
	var (
		slots  = make([]slot, 0, total)
		byInt  map[int64]int
		byEnc  map[string]int
		buf    []byte
		intCol = len(keyIdx) == 1 && len(batches) > 0 && intKey(batches[0].rec.Column(keyIdx[0])) != nil
	)
	if intCol {
		byInt = make(map[int64]int, total)
	} else {
		byEnc = make(map[string]int, total)
	}
	for bi, b := range batches {
		keyCols := make([]arrow.Array, len(keyIdx))
		for j, k := range keyIdx {
			keyCols[j] = b.rec.Column(k)
		}
		var ints func(int) int64
		if intCol {
			if ints = intKey(keyCols[0]); ints == nil {
				return nil, fmt.Errorf("%s: batch %d: key column is %s, not the type of the first batch", what, bi, keyCols[0].DataType())
			}
		}
		for ri, op := range b.ops {
			out.rows++
			var (
				si int
				ok bool
			)
			if intCol {
				if keyCols[0].IsNull(ri) {
					return nil, fmt.Errorf("%s: row %d: primary key column is null", what, ri)
				}
				k := ints(ri)
				if si, ok = byInt[k]; !ok {
					si = len(slots)
					byInt[k] = si
				}
			} else {
				var err error
				buf, err = appendKey(buf[:0], keyCols, ri)
				if err != nil {
					return nil, fmt.Errorf("%s: row %d: %w", what, ri, err)
				}
				if si, ok = byEnc[string(buf)]; !ok {
					si = len(slots)
					byEnc[string(buf)] = si
				}
			}
			if !ok {
				slots = append(slots, slot{})
			}
			s := &slots[si]
			s.batch, s.row, s.op = bi, ri, op
			s.del = s.del || op == change.OpUpdate || op == change.OpDelete || upsertInserts
		}
	}
	// Per batch, the rows whose version survives and the rows whose key needs a delete.
	keep := make([][]int64, len(batches))
	dels := make([][]int64, len(batches))
	for i := range slots {
		s := &slots[i]
		if s.op != change.OpDelete {
			keep[s.batch] = append(keep[s.batch], int64(s.row))
		}
		if s.del {
			dels[s.batch] = append(dels[s.batch], int64(s.row))
		}
	}
	for bi, b := range batches {
		if len(keep[bi]) > 0 {
			r, err := take(ctx, mem, b.rec, keep[bi])
			if err != nil {
				out.release()
				return nil, fmt.Errorf("%s: %w", what, err)
			}
			out.data = append(out.data, r)
		}
		if len(dels[bi]) > 0 {
			cols := make([]arrow.Array, len(keyIdx))
			for j, k := range keyIdx {
				cols[j] = b.rec.Column(k)
			}
			keys := array.NewRecordBatch(keySchema, cols, b.rec.NumRows())
			r, err := take(ctx, mem, keys, dels[bi])
			keys.Release()
			if err != nil {
				out.release()
				return nil, fmt.Errorf("%s: %w", what, err)
			}
			out.deletes = append(out.deletes, r)
		}
	}
	return out, nil
}

func take(ctx context.Context, mem memory.Allocator, rec arrow.RecordBatch, rows []int64) (arrow.RecordBatch, error) {
	if int64(len(rows)) == rec.NumRows() {
		identity := true
		for i, r := range rows {
			if r != int64(i) {
				identity = false
				break
			}
		}
		if identity {
			rec.Retain()
			return rec, nil
		}
	}
	b := array.NewInt64Builder(mem)
	b.AppendValues(rows, nil)
	idx := b.NewArray()
	b.Release()
	defer idx.Release()
	ctx = compute.WithAllocator(ctx, mem)
	res, err := compute.Take(ctx, *compute.DefaultTakeOptions(), compute.NewDatum(rec), compute.NewDatum(idx))
	if err != nil {
		return nil, fmt.Errorf("select rows: %w", err)
	}
	defer res.Release()
	out := res.(*compute.RecordDatum).Value
	out.Retain()
	return out, nil
}

// intKey returns a reader of an integer key column's values as int64, or nil for other types. Two rows of one
// column have equal keys exactly when the values are equal, as with appendKey.
func intKey(c arrow.Array) func(int) int64 {
	switch a := c.(type) {
	case *array.Int64:
		v := a.Int64Values()
		return func(i int) int64 { return v[i] }
	case *array.Int32:
		v := a.Int32Values()
		return func(i int) int64 { return int64(v[i]) }
	case *array.Int16:
		v := a.Int16Values()
		return func(i int) int64 { return int64(v[i]) }
	case *array.Int8:
		v := a.Int8Values()
		return func(i int) int64 { return int64(v[i]) }
	}
	return nil
}

// appendKey encodes a row's key so that two rows have equal encodings exactly when their keys are equal. All
// batches of a table are conformed to one schema first, so the same column always has the same Arrow type.
func appendKey(buf []byte, cols []arrow.Array, row int) ([]byte, error) {
	for _, c := range cols {
		if c.IsNull(row) {
			return nil, fmt.Errorf("primary key column is null")
		}
		switch a := c.(type) {
		case *array.Int8:
			buf = binary.AppendVarint(buf, int64(a.Value(row)))
		case *array.Int16:
			buf = binary.AppendVarint(buf, int64(a.Value(row)))
		case *array.Int32:
			buf = binary.AppendVarint(buf, int64(a.Value(row)))
		case *array.Int64:
			buf = binary.AppendVarint(buf, a.Value(row))
		case *array.Date32:
			buf = binary.AppendVarint(buf, int64(a.Value(row)))
		case *array.Timestamp:
			buf = binary.AppendVarint(buf, int64(a.Value(row)))
		case *array.Time64:
			buf = binary.AppendVarint(buf, int64(a.Value(row)))
		case *array.Float32:
			buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(a.Value(row)))
		case *array.Float64:
			buf = binary.LittleEndian.AppendUint64(buf, math.Float64bits(a.Value(row)))
		case *array.String:
			v := a.Value(row)
			buf = binary.AppendUvarint(buf, uint64(len(v)))
			buf = append(buf, v...)
		case *array.Binary:
			v := a.Value(row)
			buf = binary.AppendUvarint(buf, uint64(len(v)))
			buf = append(buf, v...)
		default:
			v := c.ValueStr(row)
			buf = binary.AppendUvarint(buf, uint64(len(v)))
			buf = append(buf, v...)
		}
	}
	return buf, nil
}
