package dest

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/rowmeta"
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
	// lookup are soft deletes (o.SoftDelete) whose key's values the fold did not see: delete rows in the
	// table schema, whose values the table holds (tableAttempt.lookupRows).
	lookup []arrow.RecordBatch
	rows   int64 // change rows folded
}

func (f *folded) release() {
	for _, r := range f.data {
		r.Release()
	}
	for _, r := range f.deletes {
		r.Release()
	}
	release(f.lookup)
	f.data, f.deletes, f.lookup = nil, nil, nil
}

// fold collapses the batches by key with the SDK's fold (change.Fold). keyIdx are the key columns' indices in
// the table schema, keySchema the Arrow schema of those columns (with their field ids). Without a key every row
// is appended, and an update or delete is an error because nothing identifies the row it changes. With
// o.SoftDelete a key whose last op is a delete keeps a row: its last values in the fold under the delete's
// metadata columns, or, when the fold holds only deletes of it, the delete row in lookup.
func fold(ctx context.Context, mem memory.Allocator, batches []opBatch, keyIdx []int, keySchema *arrow.Schema, upsertInserts bool, o rowmeta.Options, what string) (*folded, error) {
	out := &folded{}
	total := 0
	for _, b := range batches {
		total += len(b.ops)
	}
	f := change.NewFold(change.FoldOptions{Rows: total, UpsertInserts: upsertInserts})
	names := make([]string, len(keyIdx))
	for j := range keyIdx {
		names[j] = keySchema.Field(j).Name
	}
	for bi, b := range batches {
		cols := make([]arrow.Array, len(keyIdx))
		for j, k := range keyIdx {
			cols[j] = b.rec.Column(k)
		}
		if err := f.Add(change.NewKey(cols, names), b.ops); err != nil {
			return nil, fmt.Errorf("%s: batch %d: %w", what, bi, err)
		}
	}
	out.rows = f.Rows()
	// Per batch, the rows whose version survives and the rows whose key needs a delete.
	keep := make([][]int64, len(batches))
	dels := make([][]int64, len(batches))
	lookup := make([][]int64, len(batches))
	// soft[values batch][delete batch]: the rows whose values and whose metadata a soft-deleted key keeps.
	type pair struct{ vals, meta []int64 }
	soft := map[[2]int]*pair{}
	for _, l := range f.Last() {
		switch {
		case l.Op != change.OpDelete:
			keep[l.Batch] = append(keep[l.Batch], int64(l.Row))
		case o.SoftDelete && len(keyIdx) > 0 && l.HasValues:
			p := soft[[2]int{l.ValBatch, l.Batch}]
			if p == nil {
				p = &pair{}
				soft[[2]int{l.ValBatch, l.Batch}] = p
			}
			p.vals, p.meta = append(p.vals, int64(l.ValRow)), append(p.meta, int64(l.Row))
		case o.SoftDelete && len(keyIdx) > 0:
			lookup[l.Batch] = append(lookup[l.Batch], int64(l.Row))
		}
		if l.Replaces {
			dels[l.Batch] = append(dels[l.Batch], int64(l.Row))
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
		if len(lookup[bi]) > 0 {
			r, err := take(ctx, mem, b.rec, lookup[bi])
			if err != nil {
				out.release()
				return nil, fmt.Errorf("%s: %w", what, err)
			}
			out.lookup = append(out.lookup, r)
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(soft), func(x, y [2]int) int { return cmp.Compare(x[0]*len(batches)+x[1], y[0]*len(batches)+y[1]) }) {
		p := soft[k]
		vals, err := take(ctx, mem, batches[k[0]].rec, p.vals)
		if err != nil {
			out.release()
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		meta, err := take(ctx, mem, batches[k[1]].rec, p.meta)
		if err != nil {
			vals.Release()
			out.release()
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		out.data = append(out.data, compose(vals, meta, o))
		vals.Release()
		meta.Release()
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
