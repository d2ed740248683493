package dest

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/rowmeta"
	"github.com/skippr-dev/skippr/plugins/duckdb/ducksql"
)

// History mode (history: true): beside each mirrored table <table>, the table <table>_history gets every change
// as its own row, in order, appended in the apply's transaction with the fence, so a replayed range appends
// nothing twice (entries at or below the fence are skipped, exactly as for the mirror). Its columns: the
// stream's data columns (typed as in the mirror; a delete holds its key and NULLs), then _skippr_op (VARCHAR:
// insert, update, delete, snapshot), _skippr_source_committed_at (TIMESTAMPTZ, NULL when unknown),
// _skippr_position (BIGINT, the WAL entry) and _skippr_seq (INTEGER, the change's place among the stream's
// changes in that entry); (_skippr_position, _skippr_seq) is unique, but not declared a PRIMARY KEY, whose
// index DuckDB would hold in memory for every change ever written (see tableDDL). A TRUNCATE empties the
// mirror, not the history. A column the stream gains is added; a renamed one goes on under its new name (the
// old column keeps the values written before).

// The history table's own columns.
const (
	histOp  = "_skippr_op"
	histPos = "_skippr_position"
	histSeq = "_skippr_seq"
)

func (a *applier) historyTable(stream string) string { return TableName(stream) + "_history" }

// writeHistory appends every change of sp, in order, to the stream's history table.
func (a *applier) writeHistory(ctx context.Context, sp *change.Plan) error {
	if a.histEntry != a.entry || a.histSeq == nil {
		a.histEntry, a.histSeq = a.entry, map[string]int64{}
	}
	if err := a.ensureHistory(ctx, sp); err != nil {
		return err
	}
	var (
		cur  *arrow.Schema
		rows []row
	)
	write := func() error {
		if len(rows) == 0 {
			return nil
		}
		defer func() { rows = rows[:0] }()
		if err := a.stage(ctx, cur, rows); err != nil {
			return err
		}
		var cols, vals []string
		for _, f := range change.DataFields(cur) {
			cols = append(cols, f.Name)
			vals = append(vals, "s."+ducksql.Ident(f.Name))
		}
		var whens []string
		for _, o := range []change.Op{change.OpRead, change.OpInsert, change.OpUpdate, change.OpDelete} {
			whens = append(whens, fmt.Sprintf("WHEN %d THEN '%s'", o, rowmeta.OpName(o)))
		}
		cols = append(cols, histOp, rowmeta.SourceCommittedAt, histPos, histSeq)
		vals = append(vals, "CASE s."+ducksql.Ident(change.OpColumn)+" "+strings.Join(whens, " ")+" END",
			"s."+ducksql.Ident(change.CommittedColumn), strconv.FormatUint(a.entry, 10),
			strconv.FormatInt(a.histSeq[sp.Stream], 10)+" + s."+ducksql.Ident(stageRow))
		name := ducksql.Ident(a.s.Schema) + "." + ducksql.Ident(a.historyTable(sp.Stream))
		if err := a.exec(ctx, "INSERT INTO "+name+" ("+quoteAll(cols)+") SELECT "+strings.Join(vals, ", ")+" FROM temp.main."+stageTable+" AS s"); err != nil {
			return fmt.Errorf("append %d changes to %s: %w", len(rows), name, err)
		}
		a.histSeq[sp.Stream] += int64(len(rows))
		return nil
	}
	for _, b := range sp.Batches {
		ops, err := change.Ops(b)
		if err != nil {
			return err
		}
		times, err := change.Committed(b)
		if err != nil {
			return err
		}
		if cur != nil && !change.SameSchema(cur, b.Schema()) {
			if err := write(); err != nil {
				return err
			}
		}
		cur = b.Schema()
		for i := range int(b.NumRows()) {
			r := row{op: change.Op(ops.Value(i)), rec: b, i: i}
			r.committed, _ = change.CommittedAt(times, i)
			rows = append(rows, r)
		}
	}
	return write()
}

// ensureHistory creates the stream's history table with the mirror's column types, or adds the data columns
// it lacks. It runs with the mirror's DDL, before the entry's rows.
func (a *applier) ensureHistory(ctx context.Context, sp *change.Plan) error {
	mirror := a.tables[sp.Stream]
	table := a.historyTable(sp.Stream)
	name := ducksql.Ident(a.s.Schema) + "." + ducksql.Ident(table)
	have, err := a.columnsOf(ctx, table)
	if err != nil {
		return err
	}
	var fields []string
	seen := map[string]bool{}
	for _, s := range sp.Schemas {
		for _, f := range change.DataFields(s) {
			if k := strings.ToLower(f.Name); !seen[k] {
				seen[k] = true
				fields = append(fields, f.Name)
			}
		}
	}
	if have == nil {
		var defs []string
		for _, f := range fields {
			defs = append(defs, ducksql.Ident(f)+" "+mirror[strings.ToLower(f)])
		}
		defs = append(defs, ducksql.Ident(histOp)+" VARCHAR NOT NULL", ducksql.Ident(rowmeta.SourceCommittedAt)+" TIMESTAMPTZ",
			ducksql.Ident(histPos)+" BIGINT NOT NULL", ducksql.Ident(histSeq)+" INTEGER NOT NULL")
		if err := a.exec(ctx, "CREATE TABLE "+name+" ("+strings.Join(defs, ", ")+")"); err != nil {
			return fmt.Errorf("create table %s: %w", name, err)
		}
		return nil
	}
	for _, f := range fields {
		if _, ok := have[strings.ToLower(f)]; ok {
			continue
		}
		if err := a.exec(ctx, "ALTER TABLE "+name+" ADD COLUMN "+ducksql.Ident(f)+" "+mirror[strings.ToLower(f)]); err != nil {
			return fmt.Errorf("add column %s to %s: %w", f, name, err)
		}
	}
	return nil
}
