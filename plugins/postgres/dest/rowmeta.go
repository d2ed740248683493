package dest

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/rowmeta"
)

// The columns soft_delete and metadata_columns add (plugin-sdk/rowmeta has the semantics): every statement
// that writes a row sets them as constants, since one statement writes rows of one op of one WAL entry; all but
// _skippr_source_committed_at, which differs by row and is staged with the row's values (stage).

// metaType is a metadata column's PostgreSQL type. _skippr_deleted is NOT NULL DEFAULT false, so the rows of
// a table that had it turned on later read as live.
func metaType(k rowmeta.Kind) string {
	switch k {
	case rowmeta.Bool:
		return "boolean NOT NULL DEFAULT false"
	case rowmeta.Timestamp:
		return "timestamptz"
	case rowmeta.Int64:
		return "bigint"
	}
	return "text"
}

// metaValue is the SQL constant a row written with op in a.entry holds in column c.
func (a *applier) metaValue(c rowmeta.Column, op change.Op) string {
	switch c.Name {
	case rowmeta.Deleted:
		return strconv.FormatBool(op == change.OpDelete)
	case rowmeta.SyncedAt:
		return "now()" // the transaction's start: every row of one apply alike
	case rowmeta.Op:
		return quoteLiteral(rowmeta.OpName(op))
	case rowmeta.Position:
		return strconv.FormatUint(a.entry, 10)
	}
	return "NULL"
}

// constMeta are the metadata columns of a stream with options m that a statement sets as constants: all but
// the staged commit time.
func constMeta(m rowmeta.Options) []rowmeta.Column {
	var out []rowmeta.Column
	for _, c := range m.Columns() {
		if c.Name != rowmeta.SourceCommittedAt {
			out = append(out, c)
		}
	}
	return out
}

// metaValues returns, for an INSERT, ", col, ..." and ", value, ..." of the metadata columns of a stream with
// options m ("" for none).
func (a *applier) metaValues(m rowmeta.Options, op change.Op) (cols, vals string) {
	for _, c := range constMeta(m) {
		cols += ", " + pgx.Identifier{c.Name}.Sanitize()
		vals += ", " + a.metaValue(c, op)
	}
	return cols, vals
}

// metaSets returns "col = value, ..." of the metadata columns of a stream with options m, for an UPDATE;
// committed is the expression of the commit time (the staged column, or NULL where no source change is
// written).
func (a *applier) metaSets(m rowmeta.Options, op change.Op, committed string) string {
	var sets []string
	for _, c := range m.Columns() {
		v := a.metaValue(c, op)
		if c.Name == rowmeta.SourceCommittedAt {
			v = committed
		}
		sets = append(sets, pgx.Identifier{c.Name}.Sanitize()+" = "+v)
	}
	return strings.Join(sets, ", ")
}

// metaDefs are the column definitions of a new table.
func (a *applier) metaDefs(ts *tableState) []string {
	var defs []string
	for _, c := range ts.meta.Columns() {
		defs = append(defs, pgx.Identifier{c.Name}.Sanitize()+" "+metaType(c.Kind))
		ts.columns[c.Name] = metaType(c.Kind)
	}
	return defs
}

// ensureMeta adds the metadata columns an existing table lacks (a setting turned on later: the rows already
// there hold NULL, and _skippr_deleted false).
func (a *applier) ensureMeta(ctx context.Context, ts *tableState) error {
	for _, c := range ts.meta.Columns() {
		if _, ok := ts.columns[c.Name]; ok {
			continue
		}
		if _, err := a.tx.Exec(ctx, "ALTER TABLE "+ts.name+" ADD COLUMN IF NOT EXISTS "+pgx.Identifier{c.Name}.Sanitize()+" "+metaType(c.Kind)); err != nil {
			return fmt.Errorf("add column %s to %s: %w", c.Name, ts.name, a.cfg.Explain(err))
		}
		ts.columns[c.Name] = metaType(c.Kind)
	}
	return nil
}
