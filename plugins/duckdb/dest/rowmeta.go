package dest

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/rowmeta"
	"github.com/skippr-dev/skippr/plugins/duckdb/ducksql"
)

// The columns soft_delete and metadata_columns add (plugin-sdk/rowmeta has the semantics). Every statement
// that writes rows sets them from the staged op (the row's newest change) and a.entry, the WAL entry being
// written: one statement writes rows of one entry.

// metaType is a metadata column's DuckDB type. A new table's _skippr_deleted defaults to false. One added to an
// existing table has no default, so the rows already there hold NULL (not deleted: written before soft_delete
// was on): DuckDB 1.5 fails the commit of a transaction that alters a table after changing its rows ("Attempting
// to modify table … but another transaction has altered this table"), and filling the column, by a DEFAULT or
// an UPDATE, changes every row — so would any later ALTER of the same entry (writeEntry splits a range only between entries).
func metaType(k rowmeta.Kind, create bool) string {
	switch k {
	case rowmeta.Bool:
		if create {
			return "BOOLEAN DEFAULT false"
		}
		return "BOOLEAN"
	case rowmeta.Timestamp:
		return "TIMESTAMPTZ"
	case rowmeta.Int64:
		return "BIGINT"
	}
	return "VARCHAR"
}

// metaColumns returns the metadata columns' names and their values as expressions of op, the expression of
// the row's newest change (the staged op, or a constant), and committed, that of its source commit time (the
// staged one, or NULL).
func (a *applier) metaColumns(stream, op, committed string) (cols, vals []string) {
	for _, c := range a.s.Meta(stream).Columns() {
		var v string
		switch c.Name {
		case rowmeta.Deleted:
			v = fmt.Sprintf("(%s = %d)", op, change.OpDelete)
		case rowmeta.SyncedAt:
			v = "now()" // the transaction's start: every row of one apply alike
		case rowmeta.SourceCommittedAt:
			v = committed
		case rowmeta.Op:
			var whens []string
			for _, o := range []change.Op{change.OpRead, change.OpInsert, change.OpUpdate, change.OpDelete} {
				whens = append(whens, fmt.Sprintf("WHEN %d THEN '%s'", o, rowmeta.OpName(o)))
			}
			v = "CASE " + op + " " + strings.Join(whens, " ") + " END"
		case rowmeta.Position:
			v = strconv.FormatUint(a.entry, 10)
		default:
			v = "NULL"
		}
		cols = append(cols, c.Name)
		vals = append(vals, v)
	}
	return cols, vals
}

// metaDefs are the column definitions of a new table; it notes them in cols.
func (a *applier) metaDefs(stream string, cols map[string]string) []string {
	var defs []string
	for _, c := range a.s.Meta(stream).Columns() {
		defs = append(defs, ducksql.Ident(c.Name)+" "+metaType(c.Kind, true))
		cols[strings.ToLower(c.Name)] = metaType(c.Kind, true)
	}
	return defs
}

// metaDDL returns the statements that add the metadata columns an existing table lacks (a setting turned on
// later: the rows already there hold NULL, _skippr_deleted too; see metaType), and notes them in cols.
func (a *applier) metaDDL(stream, name string, cols map[string]string) []ddl {
	var stmts []ddl
	for _, c := range a.s.Meta(stream).Columns() {
		if _, ok := cols[strings.ToLower(c.Name)]; ok {
			continue
		}
		stmts = append(stmts, ddl{q: "ALTER TABLE " + name + " ADD COLUMN " + ducksql.Ident(c.Name) + " " + metaType(c.Kind, false),
			what: fmt.Sprintf("add column %s to %s", c.Name, name)})
		cols[strings.ToLower(c.Name)] = metaType(c.Kind, false)
	}
	return stmts
}
