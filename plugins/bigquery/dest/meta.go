package dest

import (
	"context"
	"time"

	"cloud.google.com/go/bigquery"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/rowmeta"
	"github.com/skippr-dev/skippr/plugins/bigquery/gsql"
	"github.com/skippr-dev/skippr/plugins/bigquery/rows"
)

// Soft deletes, metadata columns and history (plugin-sdk/rowmeta has the semantics; each stream's options
// are Settings.For(stream)).
//
// A stream with any of them stages its rows with their metadata (rows.StageMetaSchema: position, source
// commit time, op name, deleted, carries values, seq), because one staging table gathers the entries of a
// range and each row's metadata is its own entry's. The metadata columns are then set in the MERGE from the
// staged row; _skippr_synced_at is the transaction's time, a script variable (gsql.NowVar) declared as
// CURRENT_TIMESTAMP() before BEGIN TRANSACTION, since BigQuery fixes CURRENT_TIMESTAMP() per statement.
//
// soft_delete stages, for a key whose newest change is a delete, the values of its newest change that had
// values when the fold saw one in the same entry (change.Last.HasValues), else the key alone; the MERGE
// (gsql.MergeMeta) upserts each key's newest row with values, with _skippr_deleted = whether it is a delete,
// and gsql.MergeKeyOnlyDeletes then flags the keys whose newest change is a key-only delete, which keep their
// values. Added to a table that has rows, _skippr_deleted is NULL on them (BigQuery fills no value when a
// column is added): NULL means not deleted, so read it with IS NOT TRUE.
//
// history stages every change of the entry (not the fold's survivors) for <table>_history, appended by
// gsql.AppendHistory in the transaction of the mirror's statements and the state rows: the history table
// counts against the transaction's 100 tables (groups), and a replayed range is skipped by the same fence.

// tableSpec is what a table holds beyond the stream's data columns.
type tableSpec struct {
	extra   bigquery.Schema
	history bool   // a history table: keyed and clustered by position
	of      string // the mirrored table, for a history table's description
}

// metaFields are the columns opt adds to a mirrored table, NULLABLE so that they can be added to a table
// that has rows.
func metaFields(opt rowmeta.Options) bigquery.Schema {
	var out bigquery.Schema
	for _, c := range opt.Columns() {
		t := rows.String
		switch c.Kind {
		case rowmeta.Bool:
			t = rows.Bool
		case rowmeta.Timestamp:
			t = rows.Timestamp
		case rowmeta.Int64:
			t = rows.Int64
		}
		out = append(out, &bigquery.FieldSchema{Name: c.Name, Type: t})
	}
	return out
}

// historyFields are a history table's own columns, after the data columns.
var historyFields = bigquery.Schema{
	{Name: gsql.HistOp, Type: rows.String, Required: true},
	{Name: rowmeta.SourceCommittedAt, Type: rows.Timestamp},
	{Name: gsql.HistPosition, Type: rows.Int64, Required: true},
	{Name: gsql.HistSeq, Type: rows.Int64, Required: true},
}

// ensureTables brings the stream's table, and its history table, to schema s, after refusing a source
// column that clashes with one the destination adds.
func (a *applier) ensureTables(ctx context.Context, ss *streamState, s *arrow.Schema) error {
	if err := ss.opts.CheckSchema(ss.stream, s); err != nil {
		return err
	}
	if err := a.ensureTable(ctx, ss.table, s, tableSpec{extra: metaFields(ss.opts)}); err != nil {
		return err
	}
	if !ss.opts.History {
		return nil
	}
	return a.ensureTable(ctx, ss.hist, s, tableSpec{extra: historyFields, history: true, of: ss.table})
}

// stagedRow is one row to stage: row of rec, with the op and (for a segment with meta) metadata.
type stagedRow struct {
	rec  arrow.RecordBatch
	row  int
	op   change.Op
	meta rows.Meta
}

// survivors are the rows the fold keeps of an entry, each its key's newest change. With soft_delete, a
// delete whose key had values in the entry is staged with those values (Last.ValBatch, ValRow).
func (a *applier) survivors(ss *streamState, e *change.Plan) ([]stagedRow, error) {
	last := e.Fold.Last()
	out := make([]stagedRow, 0, len(last))
	times := map[int]*array.Timestamp{}
	for _, l := range last {
		r := stagedRow{rec: e.Batches[l.Batch], row: l.Row, op: l.Op}
		if ss.opts.Any() {
			at, err := committedAt(times, e.Batches, l.Batch, l.Row)
			if err != nil {
				return nil, err
			}
			vals := l.Op != change.OpDelete
			if ss.opts.SoftDelete && l.Op == change.OpDelete && l.HasValues {
				r.rec, r.row, vals = e.Batches[l.ValBatch], l.ValRow, true
			}
			r.meta = rows.Meta{Position: int64(a.seq), Committed: at, OpName: rowmeta.OpName(l.Op),
				Deleted: l.Op == change.OpDelete, Vals: vals}
		}
		out = append(out, r)
	}
	return out, nil
}

// changes are every change row of an entry, in order, each with its seq among the stream's changes of the
// entry: the history's rows.
func (a *applier) changes(e *change.Plan) ([]stagedRow, error) {
	var out []stagedRow
	times := map[int]*array.Timestamp{}
	for bi, rec := range e.Batches {
		ops, err := change.Ops(rec)
		if err != nil {
			return nil, err
		}
		for i := range int(rec.NumRows()) {
			at, err := committedAt(times, e.Batches, bi, i)
			if err != nil {
				return nil, err
			}
			op := change.Op(ops.Value(i))
			out = append(out, stagedRow{rec: rec, row: i, op: op, meta: rows.Meta{Position: int64(a.seq), Committed: at,
				OpName: rowmeta.OpName(op), Deleted: op == change.OpDelete, Vals: op != change.OpDelete, Seq: int64(len(out))}})
		}
	}
	return out, nil
}

// committedAt is the source commit time of row i of batch bi (zero: unknown); cache holds each batch's
// commit-time column (nil: it has none) once looked up.
func committedAt(cache map[int]*array.Timestamp, batches []arrow.RecordBatch, bi, i int) (time.Time, error) {
	col, ok := cache[bi]
	if !ok {
		var err error
		if col, err = change.Committed(batches[bi]); err != nil {
			return time.Time{}, err
		}
		cache[bi] = col
	}
	t, _ := change.CommittedAt(col, i)
	return t, nil
}

// statements are the statements that move the segment's staged rows into target (see gsql).
func (sg *segment) statements(target, stage gsql.Table, opt rowmeta.Options) []string {
	switch {
	case sg.key == nil && !opt.Any():
		return []string{gsql.Append(target, stage, sg.cols, rows.StageName)}
	case sg.key == nil:
		return []string{gsql.AppendMeta(target, stage, sg.cols, rows.StageName, opt)}
	case !opt.Any():
		return []string{gsql.Merge(target, stage, sg.cols, sg.key, rows.StageName)}
	case !opt.SoftDelete:
		return []string{gsql.MergeMeta(target, stage, sg.cols, sg.key, rows.StageName, opt)}
	}
	var out []string
	if sg.valued > 0 {
		out = append(out, gsql.MergeMeta(target, stage, sg.cols, sg.key, rows.StageName, opt))
	}
	if sg.keyOnly > 0 {
		out = append(out, gsql.MergeKeyOnlyDeletes(target, stage, sg.cols, sg.key, rows.StageName, opt))
	}
	return out
}
