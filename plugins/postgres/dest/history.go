package dest

import (
	"context"
	"fmt"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/jackc/pgx/v5"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/rowmeta"
	"github.com/skippr-dev/skippr/plugin-sdk/values"
)

// History mode (history: true): beside each mirrored table <table>, the table <table>_history gets every change
// as its own row, in order, appended in the apply's transaction with the fence, so a replayed range appends
// nothing twice (the range-replay skeleton skips the entries at or below the fence, exactly as for the
// mirror). Its columns: the stream's data columns (as the mirror types them; a delete holds its key and NULLs),
// then
//
//	_skippr_op                   text         insert, update, delete or snapshot
//	_skippr_source_committed_at  timestamptz  the change's source commit time (NULL: unknown, a snapshot row)
//	_skippr_position             bigint       the WAL entry that carried the change
//	_skippr_seq                  integer      the change's place among the stream's changes in that entry
//
// with PRIMARY KEY (_skippr_position, _skippr_seq): (position, seq) orders every change of a key. A TRUNCATE
// empties the mirror, not the history (the history is the record of what happened; the truncate itself is
// not a row). History columns follow the mirror's: added, renamed and retyped with it.

// The history table's own columns.
const (
	histOp  = "_skippr_op"
	histPos = "_skippr_position"
	histSeq = "_skippr_seq"
)

// historyName is the quoted history table of stream.
func (a *applier) historyName(stream string) string {
	return pgx.Identifier{a.cfg.TargetSchema, TableName(stream) + "_history"}.Sanitize()
}

// writeHistory appends every change of sp, in order, to the stream's history table. ts is the mirror's state,
// brought up to sp's schemas.
func (a *applier) writeHistory(ctx context.Context, sp *change.Plan, ts *tableState) error {
	if a.histEntry != a.entry || a.histSeq == nil {
		a.histEntry, a.histSeq = a.entry, map[string]int64{}
	}
	hs, err := a.ensureHistory(ctx, sp, ts)
	if err != nil {
		return err
	}
	// One stage and INSERT per run of batches of one schema.
	var (
		cur  *arrow.Schema
		rows []row
	)
	write := func() error {
		if len(rows) == 0 {
			return nil
		}
		defer func() { rows = rows[:0] }()
		return a.appendHistory(ctx, hs, cur, rows)
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
			r := row{op: change.Op(ops.Value(i)), rec: b, i: i, seq: a.histSeq[sp.Stream]}
			r.committed, _ = change.CommittedAt(times, i)
			a.histSeq[sp.Stream]++
			rows = append(rows, r)
		}
	}
	return write()
}

// appendHistory stages rows (all of schema s) and inserts them with their position.
func (a *applier) appendHistory(ctx context.Context, hs *tableState, s *arrow.Schema, rows []row) error {
	var cols []string
	for _, f := range change.DataFields(s) {
		if a.cfg.Policy != values.NullAndRecord || f.Name != change.MetaColumn {
			cols = append(cols, f.Name)
		}
	}
	cols = append(cols, histOp, rowmeta.SourceCommittedAt, histSeq)
	if a.cfg.Policy == values.NullAndRecord {
		cols = append(cols, change.MetaColumn) // last: stage fills it with the row's replacements
	}
	stage, err := a.stage(ctx, hs, s, cols, rows)
	if err != nil {
		return err
	}
	q := quoteAll(cols)
	sql := fmt.Sprintf("INSERT INTO %s (%s, %s) SELECT %s, %d FROM %s", hs.name, q, pgx.Identifier{histPos}.Sanitize(), q, a.entry, stage)
	if _, err := a.tx.Exec(ctx, sql); err != nil {
		return fmt.Errorf("append %d changes to %s: %w", len(rows), hs.name, a.cfg.Explain(err))
	}
	return nil
}

// ensureHistory creates the stream's history table, or brings its data columns to the mirror's: renamed as
// the schemas rename them, added, and retyped where the mirror's type differs.
func (a *applier) ensureHistory(ctx context.Context, sp *change.Plan, ts *tableState) (*tableState, error) {
	name := a.historyName(sp.Stream)
	hs := &tableState{name: name, columns: map[string]string{}}
	rows, err := a.tx.Query(ctx, `
		SELECT a.attname, format_type(a.atttypid, a.atttypmod)
		FROM pg_attribute a WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped`, name)
	if err != nil {
		return nil, a.cfg.Explain(err)
	}
	for rows.Next() {
		var c, t string
		if err := rows.Scan(&c, &t); err != nil {
			rows.Close()
			return nil, err
		}
		hs.columns[c] = t
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, a.cfg.Explain(err)
	}
	var fields []arrow.Field
	seen := map[string]bool{}
	for _, s := range sp.Schemas {
		for _, f := range a.withMeta(change.DataFields(s)) {
			if !seen[f.Name] {
				seen[f.Name] = true
				fields = append(fields, f)
			}
		}
	}
	own := []struct{ name, typ string }{{histOp, "text NOT NULL"}, {rowmeta.SourceCommittedAt, "timestamptz"}, {histPos, "bigint NOT NULL"}, {histSeq, "integer NOT NULL"}}
	if len(hs.columns) == 0 {
		var defs []string
		for _, f := range fields {
			defs = append(defs, pgx.Identifier{f.Name}.Sanitize()+" "+ts.columns[f.Name])
			hs.columns[f.Name] = ts.columns[f.Name]
		}
		for _, c := range own {
			defs = append(defs, pgx.Identifier{c.name}.Sanitize()+" "+c.typ)
			hs.columns[c.name] = strings.TrimSuffix(c.typ, " NOT NULL")
		}
		defs = append(defs, "PRIMARY KEY ("+quoteAll([]string{histPos, histSeq})+")")
		if _, err := a.tx.Exec(ctx, "CREATE TABLE "+name+" ("+strings.Join(defs, ", ")+")"); err != nil {
			return nil, fmt.Errorf("create table %s: %w", name, a.cfg.Explain(err))
		}
		return hs, nil
	}
	for _, f := range fields {
		want := ts.columns[f.Name]
		if from := change.RenamedFrom(f); from != "" {
			if _, has := hs.columns[f.Name]; !has {
				if t, old := hs.columns[from]; old {
					if _, err := a.tx.Exec(ctx, "ALTER TABLE "+name+" RENAME COLUMN "+pgx.Identifier{from}.Sanitize()+" TO "+pgx.Identifier{f.Name}.Sanitize()); err != nil {
						return nil, fmt.Errorf("rename column %s of %s: %w", from, name, a.cfg.Explain(err))
					}
					delete(hs.columns, from)
					hs.columns[f.Name] = t
				}
			}
		}
		have, ok := hs.columns[f.Name]
		q := pgx.Identifier{f.Name}.Sanitize()
		switch {
		case !ok:
			if _, err := a.tx.Exec(ctx, "ALTER TABLE "+name+" ADD COLUMN "+q+" "+want); err != nil {
				return nil, fmt.Errorf("add column %s to %s: %w", f.Name, name, a.cfg.Explain(err))
			}
		case have != want:
			if _, err := a.tx.Exec(ctx, "ALTER TABLE "+name+" ALTER COLUMN "+q+" TYPE "+want+" USING "+q+"::"+want); err != nil {
				return nil, fmt.Errorf("change column %s of %s to %s (as in %s): %w", f.Name, name, want, ts.name, a.cfg.Explain(err))
			}
		}
		hs.columns[f.Name] = want
	}
	return hs, nil
}
