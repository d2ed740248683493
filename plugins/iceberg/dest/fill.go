package dest

import (
	"context"
	"fmt"
	"iter"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go"
	iceio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
)

// A format v2 table has no initial-default (initial.go), so a column added with a value for the rows already
// there (PostgreSQL's ADD COLUMN … DEFAULT) is filled by rewriting the table's live data files with the value
// in the column, staged in the same transaction as the schema update, the apply's rows and the fence: one
// catalog commit, so a reader never sees the column NULL on old rows, a crash before it leaves nothing
// visible (the replay does it again), and a crash after it makes the replay a no-op (the fence).
//
// Every live data file is read with its deletes applied (iceberg-go's ReadTasks, the reader compaction uses),
// file by file in batches, and written anew; the old data files and every live delete file go in the same
// rewrite snapshot. Applying the deletes is required, not an optimisation: an equality delete reaches only
// rows of a lower sequence number, and the rewritten rows get a new one.
//
// The rewrite is its own snapshot (operation "replace": the rows are the ones the table held, as a v3 table
// with an initial-default would read them), staged before the apply's row delta. The apply's equality deletes
// must reach the rewritten rows (an update of an old key in the same apply), so they need the higher sequence
// number of a snapshot of their own; both snapshots land in the one catalog commit. The rewrite snapshot does
// not carry the pipeline's fence in its summary: a re-snapshot counts the rows of fenced snapshots as received
// (resnapshot.go), and rewritten rows were not.

// propFilled names, in a rewrite snapshot's summary, the columns it filled for the rows already there.
const propFilled = "skippr.filled-columns"

// fillBatchRows is the rows per Arrow batch a fill reads, so the rewrite holds a few batches of the table at a
// time, whatever its size. Measured (BenchmarkFillV2, 3M rows): the fill's peak RSS grew by 358 MiB with
// 65,536-row batches and by 213 MiB with 8,192, at about the same speed.
const fillBatchRows = 8_192

// fillBufferedBatches is how many batches the writer may hold queued (iceberg-go's default, 64, would hold
// 4M rows of the table in memory when the writer falls behind the reader).
const fillBufferedBatches = 2

// fillExisting stages the rewrite of a format v2 table's live data files with the columns this attempt adds
// with a value for the rows already there (a.initials) filled in. A truncate in the same apply removes those
// rows anyway; a table without a snapshot has none.
func (a *tableAttempt) fillExisting(ctx context.Context) error {
	if len(a.initials) == 0 || a.g.truncated || a.tbl.Metadata().Version() >= 3 || a.tbl.CurrentSnapshot() == nil {
		return nil
	}
	staged, err := a.tx.StagedTable()
	if err != nil {
		return err
	}
	// iceberg-go refuses to scan a staged table; the same metadata as a table reads the snapshot the
	// transaction builds on, in the staged schema.
	view := table.New(staged.Identifier(), staged.Metadata(), staged.MetadataLocation(),
		func(ctx context.Context) (iceio.IO, error) { return staged.FS(ctx) }, a.oc.cat)
	name := strings.Join(a.tbl.Identifier(), ".")
	target, err := table.SchemaToArrowSchema(staged.Schema(), nil, true, false)
	if err != nil {
		return fmt.Errorf("arrow schema of %s: %w", name, err)
	}
	cols := make([]string, len(a.initials))
	for i, f := range a.initials {
		cols[i] = f.column
	}
	tasks, err := view.Scan().PlanFiles(ctx)
	if err != nil {
		return fmt.Errorf("fill %s for the existing rows: plan: %w", strings.Join(cols, ", "), err)
	}
	if len(tasks) == 0 {
		return nil
	}
	var (
		added   []iceberg.DataFile
		rows    int64
		rowsErr error
	)
	filled := a.filledRows(ctx, view, tasks, target, &rows, &rowsErr)
	for df, err := range table.WriteRecords(ctx, staged.Table, target, filled, table.WithTargetFileSize(a.s.TargetFileSize), table.WithParquetRowGroupLimit(RowGroupRows),
		table.WithRecordBatchBufferSize(fillBufferedBatches)) {
		if err != nil {
			return fmt.Errorf("fill %s for the existing rows: write: %w", strings.Join(cols, ", "), err)
		}
		added = append(added, df)
	}
	if rowsErr != nil {
		return fmt.Errorf("fill %s for the existing rows: %w", strings.Join(cols, ", "), rowsErr)
	}
	deletes, err := liveDeleteFiles(a.fs, a.tbl.CurrentSnapshot())
	if err != nil {
		return fmt.Errorf("fill %s for the existing rows: %w", strings.Join(cols, ", "), err)
	}
	rw := a.tx.NewRewrite(iceberg.Properties{propStream: a.g.stream, propFilled: strings.Join(cols, ",")})
	for _, t := range tasks {
		rw.DeleteFile(t.File)
	}
	for _, df := range added {
		rw.AddDataFile(df)
	}
	for _, df := range deletes {
		rw.DeleteFile(df)
	}
	if err := rw.Commit(ctx); err != nil {
		return fmt.Errorf("fill %s for the existing rows: stage the rewrite: %w", strings.Join(cols, ", "), err)
	}
	a.d.log().Info("iceberg: filled an added column for the rows already there (format v2: data files rewritten in the schema change's commit)",
		"table", name, "columns", strings.Join(cols, ","), "rows", rows, "data_files_removed", len(tasks),
		"data_files_added", len(added), "delete_files_removed", len(deletes))
	return nil
}

// filledRows yields the rows of the tasks' data files, deletes applied, in the staged schema (target) with
// each fill column set to its value. It reads one data file at a time in batches of fillBatchRows; the rows
// it yields are counted in rows, and a failure is also left in errp (WriteRecords may report its own first).
func (a *tableAttempt) filledRows(ctx context.Context, view *table.Table, tasks []table.FileScanTask, target *arrow.Schema, rows *int64, errp *error) iter.Seq2[arrow.RecordBatch, error] {
	return func(yield func(arrow.RecordBatch, error) bool) {
		fail := func(err error) {
			*errp = err
			yield(nil, err)
		}
		for _, t := range tasks {
			_, recs, err := view.Scan(table.WithMaxConcurrency(1), table.WithArrowBatchSize(fillBatchRows)).ReadTasks(ctx, []table.FileScanTask{t})
			if err != nil {
				fail(fmt.Errorf("read %s: %w", t.File.FilePath(), err))
				return
			}
			for rec, err := range recs {
				if err != nil {
					fail(fmt.Errorf("read %s: %w", t.File.FilePath(), err))
					return
				}
				out, err := a.withFills(ctx, rec, target)
				rec.Release()
				if err != nil {
					fail(fmt.Errorf("read %s: %w", t.File.FilePath(), err))
					return
				}
				*rows += out.NumRows()
				if !yield(out, nil) {
					return
				}
			}
		}
	}
}

// withFills is rec (a batch of a file written before the fill columns existed, so they read NULL) in the
// target schema with every fill column holding its value.
func (a *tableAttempt) withFills(ctx context.Context, rec arrow.RecordBatch, target *arrow.Schema) (arrow.RecordBatch, error) {
	out, err := conform(ctx, a.mem, rec, target, "existing rows")
	if err != nil {
		return nil, err
	}
	for _, f := range a.initials {
		idx := target.FieldIndices(f.column)
		if len(idx) != 1 {
			out.Release()
			return nil, fmt.Errorf("column %s is not in the table schema", f.column)
		}
		col, err := literalArray(a.mem, f.lit, target.Field(idx[0]).Type, int(out.NumRows()))
		if err != nil {
			out.Release()
			return nil, fmt.Errorf("column %s: %w", f.column, err)
		}
		cs := slices.Clone(out.Columns())
		cs[idx[0]] = col
		next := array.NewRecordBatch(target, cs, out.NumRows())
		col.Release()
		out.Release()
		out = next
	}
	return out, nil
}

// liveDeleteFiles lists the position and equality delete files snap holds. Once every live data file is
// rewritten with its deletes applied, none of them has a row left to apply to.
func liveDeleteFiles(fsys iceio.IO, snap *table.Snapshot) ([]iceberg.DataFile, error) {
	manifests, err := snap.Manifests(fsys)
	if err != nil {
		return nil, fmt.Errorf("manifests: %w", err)
	}
	var out []iceberg.DataFile
	for _, m := range manifests {
		if m.ManifestContent() != iceberg.ManifestContentDeletes {
			continue
		}
		entries, err := m.FetchEntries(fsys, true)
		if err != nil {
			return nil, fmt.Errorf("manifest %s: %w", m.FilePath(), err)
		}
		for _, e := range entries {
			if e.Status() != iceberg.EntryStatusDELETED && e.DataFile().ContentType() != iceberg.EntryContentData {
				out = append(out, e.DataFile())
			}
		}
	}
	return out, nil
}

// warnUnfilled logs the columns a chunk of a spilled apply adds with a value for the existing rows (from the
// from-th of a.initials on) when earlier chunks of the apply were written out already, on a v2 table: the
// rewrite fills the table's files, not those chunks' (uncommitted, in the older shape), whose rows, written
// before the ADD COLUMN at the source, read NULL. (A v3 table's initial-default covers them.)
func (st *spilledTable) warnUnfilled(from int) {
	if len(st.files) == 0 || st.a.tbl.Metadata().Version() >= 3 {
		return
	}
	for _, f := range st.a.initials[from:] {
		st.d.log().Warn("iceberg: rows this apply wrote out (spilled, see memory_limit) before a column was added read NULL in it, not the value they hold at the source; a re-snapshot of the stream fills them",
			"table", st.g.table, "column", f.column, "value", f.lit.String(), "spilled_files", len(st.files))
	}
}
