package dest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/rowmeta"
)

// Soft deletes and sync metadata columns (plugin-sdk/rowmeta, decided per stream with Settings.For): the
// columns are appended to each change batch once its reserved columns are stripped (withMeta), so they reach
// the table like any other column: added by schema evolution to new and existing tables (rows written before
// read NULL, which for _skippr_deleted means not deleted), conformed, folded, written, in the apply's one
// commit with the fence. A soft delete is an upsert: the key's earlier version goes by the usual equality
// delete, and a row with the key's last values and _skippr_deleted = true is added. The values come from the
// apply's own fold when the key's insert or update is in it (change.Last.HasValues), else from the table: a
// key-only delete reads the rows of its keys from the table's current snapshot (lookupRows), one scan of the
// table per apply (per spilled chunk) that holds such deletes.

// addedMeta marks an Arrow field this plugin adds (rowmeta's columns, the history table's): dataSchema keeps
// it although its name has the protocol's reserved prefix.
const addedMeta = "skippr.iceberg.added"

func addedField(name string, t arrow.DataType) arrow.Field {
	md := arrow.NewMetadata([]string{addedMeta}, []string{"true"})
	return arrow.Field{Name: name, Type: t, Nullable: true, Metadata: md}
}

func isAdded(f arrow.Field) bool {
	v, ok := f.Metadata.GetValue(addedMeta)
	return ok && v == "true"
}

var utcMicros = &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}

// metaRow is what the metadata columns of one row say.
type metaRow struct {
	op        change.Op
	committed time.Time // zero: unknown
	position  uint64
}

// withMeta returns st, the stripped change batch rec, with the columns o adds, in rowmeta's order. syncedAt is
// the apply's time, position the row's WAL entry. The caller releases the result.
func withMeta(mem memory.Allocator, st, rec arrow.RecordBatch, ops []change.Op, o rowmeta.Options, position uint64, syncedAt time.Time) (arrow.RecordBatch, error) {
	times, err := change.Committed(rec)
	if err != nil {
		return nil, err
	}
	rows := make([]metaRow, len(ops))
	for i, op := range ops {
		rows[i] = metaRow{op: op, position: position}
		rows[i].committed, _ = change.CommittedAt(times, i)
	}
	return appendMeta(mem, st, o, rows, syncedAt), nil
}

// appendMeta appends o's columns, filled from rows, to st.
func appendMeta(mem memory.Allocator, st arrow.RecordBatch, o rowmeta.Options, rows []metaRow, syncedAt time.Time) arrow.RecordBatch {
	fields := slices.Clone(st.Schema().Fields())
	cols := slices.Clone(st.Columns())
	var made []arrow.Array
	for _, c := range o.Columns() {
		var arr arrow.Array
		switch c.Name {
		case rowmeta.Deleted:
			b := array.NewBooleanBuilder(mem)
			for _, r := range rows {
				b.Append(r.op == change.OpDelete)
			}
			arr = b.NewArray()
			b.Release()
			fields = append(fields, addedField(c.Name, arrow.FixedWidthTypes.Boolean))
		case rowmeta.SyncedAt:
			b := array.NewTimestampBuilder(mem, utcMicros)
			for range rows {
				b.Append(arrow.Timestamp(syncedAt.UnixMicro()))
			}
			arr = b.NewArray()
			b.Release()
			fields = append(fields, addedField(c.Name, utcMicros))
		case rowmeta.SourceCommittedAt:
			b := array.NewTimestampBuilder(mem, utcMicros)
			for _, r := range rows {
				if r.committed.IsZero() {
					b.AppendNull()
				} else {
					b.Append(arrow.Timestamp(r.committed.UnixMicro()))
				}
			}
			arr = b.NewArray()
			b.Release()
			fields = append(fields, addedField(c.Name, utcMicros))
		case rowmeta.Op:
			b := array.NewStringBuilder(mem)
			for _, r := range rows {
				b.Append(rowmeta.OpName(r.op))
			}
			arr = b.NewArray()
			b.Release()
			fields = append(fields, addedField(c.Name, arrow.BinaryTypes.String))
		case rowmeta.Position:
			b := array.NewInt64Builder(mem)
			for _, r := range rows {
				b.Append(int64(r.position))
			}
			arr = b.NewArray()
			b.Release()
			fields = append(fields, addedField(c.Name, arrow.PrimitiveTypes.Int64))
		}
		cols = append(cols, arr)
		made = append(made, arr)
	}
	md := st.Schema().Metadata()
	out := array.NewRecordBatch(arrow.NewSchema(fields, &md), cols, st.NumRows())
	for _, a := range made {
		a.Release()
	}
	return out
}

// compose returns rows whose columns are those of values, except o's metadata columns, which come from meta:
// a soft-deleted row is its last values under the delete's metadata. Both are in the table schema, with as
// many rows.
func compose(values, meta arrow.RecordBatch, o rowmeta.Options) arrow.RecordBatch {
	cols := make([]arrow.Array, values.NumCols())
	for i, f := range values.Schema().Fields() {
		if o.Has(f.Name) {
			cols[i] = meta.Column(i)
		} else {
			cols[i] = values.Column(i)
		}
	}
	return array.NewRecordBatch(values.Schema(), cols, values.NumRows())
}

// deletedMeta returns rec (rows of the table schema) with o's metadata columns saying the rows were deleted by
// entry position without a known commit time: what a re-snapshot's end writes for the rows the source no
// longer has.
func deletedMeta(mem memory.Allocator, rec arrow.RecordBatch, o rowmeta.Options, position uint64, syncedAt time.Time) (arrow.RecordBatch, error) {
	var (
		fields []arrow.Field
		cols   []arrow.Array
	)
	for i, f := range rec.Schema().Fields() {
		if !o.Has(f.Name) {
			fields, cols = append(fields, f), append(cols, rec.Column(i))
		}
	}
	md := rec.Schema().Metadata()
	base := array.NewRecordBatch(arrow.NewSchema(fields, &md), cols, rec.NumRows())
	defer base.Release()
	rows := make([]metaRow, rec.NumRows())
	for i := range rows {
		rows[i] = metaRow{op: change.OpDelete, position: position}
	}
	withCols := appendMeta(mem, base, o, rows, syncedAt)
	defer withCols.Release()
	meta, err := conform(context.Background(), mem, withCols, rec.Schema(), "deleted rows")
	if err != nil {
		return nil, err
	}
	defer meta.Release()
	return compose(rec, meta, o), nil
}

// lookupRows reads from the table's snapshot the attempt began on the rows of the keys in dels (delete rows in
// the table schema, key columns set), and returns, for every key found, its values under the delete row's
// metadata (compose). A key the table does not hold is left out: there are no values to keep. The table is
// scanned batch by batch; memory holds the keys asked for and the rows found, as many as dels.
func (a *tableAttempt) lookupRows(ctx context.Context, c *changeSet, dels []arrow.RecordBatch, o rowmeta.Options) ([]arrow.RecordBatch, error) {
	if len(dels) == 0 || a.tbl.CurrentSnapshot() == nil {
		return nil, nil
	}
	type at struct{ batch, row int }
	want := map[string]at{}
	var buf []byte
	for bi, d := range dels {
		k := batchKey(opBatch{rec: d}, c.keyIdx)
		for r := range int(d.NumRows()) {
			var err error
			if buf, err = k.Append(buf[:0], r); err != nil {
				return nil, err
			}
			want[string(buf)] = at{bi, r}
		}
	}
	_, batches, err := a.tbl.Scan().ToArrowRecords(ctx)
	if err != nil {
		return nil, fmt.Errorf("scan %s for the values of deleted keys: %w", a.g.table, err)
	}
	var found []arrow.RecordBatch
	fail := func(err error) ([]arrow.RecordBatch, error) {
		release(found)
		return nil, err
	}
	for b, err := range batches {
		if err != nil {
			return fail(fmt.Errorf("scan %s for the values of deleted keys: %w", a.g.table, err))
		}
		rec, err := conform(ctx, a.mem, b, c.target, "table "+a.g.table)
		b.Release()
		if err != nil {
			return fail(err)
		}
		k := batchKey(opBatch{rec: rec}, c.keyIdx)
		// Rows found, grouped by the delete batch whose metadata they take.
		hits := map[int][2][]int64{}
		for r := range int(rec.NumRows()) {
			if buf, err = k.Append(buf[:0], r); err != nil {
				rec.Release()
				return fail(err)
			}
			if w, ok := want[string(buf)]; ok {
				h := hits[w.batch]
				h[0], h[1] = append(h[0], int64(r)), append(h[1], int64(w.row))
				hits[w.batch] = h
			}
		}
		for _, bi := range slices.Sorted(maps.Keys(hits)) {
			h := hits[bi]
			vals, err := take(ctx, a.mem, rec, h[0])
			if err != nil {
				rec.Release()
				return fail(err)
			}
			meta, err := take(ctx, a.mem, dels[bi], h[1])
			if err != nil {
				vals.Release()
				rec.Release()
				return fail(err)
			}
			found = append(found, compose(vals, meta, o))
			vals.Release()
			meta.Release()
		}
		rec.Release()
	}
	return found, nil
}

// liveFilter is the row filter of a soft-deleting table's live rows: _skippr_deleted is not true (NULL, in rows
// written before the column was added, means not deleted).
func liveFilter(tbl *table.Table) (iceberg.BooleanExpression, bool) {
	if _, ok := tbl.Schema().FindFieldByName(rowmeta.Deleted); !ok {
		return nil, false
	}
	ref := iceberg.Reference(rowmeta.Deleted)
	return iceberg.NewOr(iceberg.IsNull(ref), iceberg.EqualTo(ref, false)), true
}

// keptDeleted writes, for a soft-deleting table, the live rows of keys (batches of the re-snapshot's key
// schema) that a re-snapshot's end found missing at the source, marked deleted by entry, as data files of
// the staged table. It scans the table once.
func (a *tableAttempt) keptDeleted(ctx context.Context, staged *table.StagedTable, keys []arrow.RecordBatch, entry uint64) ([]iceberg.DataFile, error) {
	target, err := table.SchemaToArrowSchema(staged.Schema(), nil, true, false)
	if err != nil {
		return nil, err
	}
	keyIdx := make([]int, a.rs.keySchema.NumFields())
	for i, f := range a.rs.keySchema.Fields() {
		idx := target.FieldIndices(f.Name)
		if len(idx) != 1 {
			return nil, fmt.Errorf("key column %s is not in table %s", f.Name, a.g.table)
		}
		keyIdx[i] = idx[0]
	}
	want := map[string]struct{}{}
	var buf []byte
	for _, k := range keys {
		key := change.NewKey(k.Columns(), nil)
		for r := range int(k.NumRows()) {
			if buf, err = key.Append(buf[:0], r); err != nil {
				return nil, err
			}
			want[string(buf)] = struct{}{}
		}
	}
	var opts []table.ScanOption
	if f, ok := liveFilter(a.tbl); ok {
		opts = append(opts, table.WithRowFilter(f))
	}
	_, batches, err := a.tbl.Scan(opts...).ToArrowRecords(ctx)
	if err != nil {
		return nil, fmt.Errorf("scan %s: %w", a.g.table, err)
	}
	var rows []arrow.RecordBatch
	defer func() { release(rows) }()
	for b, err := range batches {
		if err != nil {
			return nil, fmt.Errorf("scan %s: %w", a.g.table, err)
		}
		rec, err := conform(ctx, a.mem, b, target, "table "+a.g.table)
		b.Release()
		if err != nil {
			return nil, err
		}
		key := batchKey(opBatch{rec: rec}, keyIdx)
		var hit []int64
		for r := range int(rec.NumRows()) {
			if buf, err = key.Append(buf[:0], r); err != nil {
				rec.Release()
				return nil, err
			}
			if _, ok := want[string(buf)]; ok {
				hit = append(hit, int64(r))
			}
		}
		if len(hit) > 0 {
			t, err := take(ctx, a.mem, rec, hit)
			if err == nil {
				var marked arrow.RecordBatch
				if marked, err = deletedMeta(a.mem, t, a.rs.meta, entry, a.rs.syncedAt); err == nil {
					rows = append(rows, marked)
				}
				t.Release()
			}
			if err != nil {
				rec.Release()
				return nil, err
			}
		}
		rec.Release()
	}
	if len(rows) == 0 {
		return nil, nil
	}
	var files []iceberg.DataFile
	for df, err := range table.WriteRecords(ctx, staged.Table, target, retained(rows), table.WithTargetFileSize(a.s.TargetFileSize), table.WithParquetRowGroupLimit(RowGroupRows)) {
		if err != nil {
			return nil, fmt.Errorf("write data files: %w", err)
		}
		files = append(files, df)
	}
	return files, nil
}
