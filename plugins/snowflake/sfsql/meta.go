package sfsql

import "time"

// The columns of plugin-sdk/rowmeta as Snowflake stores them: Name upper-cases a simple name, so the table
// has _SKIPPR_DELETED and users query it without quotes. The plugin stages each row's values of these columns
// in the load's Parquet file beside its data (they differ by row in a coalesced range: each row's newest
// change came in its own WAL entry), under the same names, and a MERGE or INSERT copies them.
const (
	DeletedColumn           = "_SKIPPR_DELETED"
	SyncedAtColumn          = "_SKIPPR_SYNCED_AT"
	SourceCommittedAtColumn = "_SKIPPR_SOURCE_COMMITTED_AT"
	OpNameColumn            = "_SKIPPR_OP_NAME" // staged only: the op as _SKIPPR_OP's text (the staged _SKIPPR_OP is its number)
	PositionColumn          = "_SKIPPR_POSITION"
	// KeyOnlyColumn, staged only with soft_delete: the row is a delete and the apply saw none of the key's
	// values, so the MERGE flips the flag of the row the table holds and inserts nothing.
	KeyOnlyColumn = "_SKIPPR_KEY_ONLY"
	// SeqColumn is a history table's: the change's place among its stream's changes in its WAL entry.
	SeqColumn = "_SKIPPR_SEQ"
	// HistorySuffix makes a stream's history table name of its table's (ORDERS → ORDERS_HISTORY).
	HistorySuffix = "_HISTORY"
)

// Meta is what a MERGE or INSERT writes beyond a load's data columns.
type Meta struct {
	// SoftDelete: a delete keeps the row, flagged (the staged KeyOnlyColumn tells which deletes carry values).
	SoftDelete bool
	// Sets are the metadata columns and the value each takes: a staged column (Staged) or a literal.
	Sets []Set
}

// Set is one metadata column of Meta and its value's expression.
type Set struct{ Column, Value string }

// Staged is the expression of a staging table's column in a MERGE or INSERT.
func Staged(column string) string { return "s." + Ident(column) }

// TimestampLiteral is t as a TIMESTAMP_TZ constant, to microseconds and in UTC: the apply's one
// _SKIPPR_SYNCED_AT for every row it writes (sql-reference/functions/cast; the text is the
// YYYY-MM-DD HH24:MI:SS.FF TZH:TZM form AUTO detection reads, sql-reference/date-time-input-output).
func TimestampLiteral(t time.Time) string {
	return "CAST('" + t.UTC().Format("2006-01-02 15:04:05.000000") + " +00:00' AS TIMESTAMP_TZ(9))"
}
