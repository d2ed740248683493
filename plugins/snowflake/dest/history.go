package dest

import (
	"github.com/skippr-dev/skippr/plugins/snowflake/sfsql"
)

// History mode (history: true, per stream): beside a stream's table <TABLE>, <TABLE>_HISTORY gets every
// change of the stream as its own row, appended (COPY of the range's changes into a staging table, INSERT …
// SELECT) in the apply's transaction with the state row, so a replayed range appends nothing twice: the fence
// skips it whole, or the entries at or below it (serve.Range.Entries), exactly as for the table. The range is
// folded in chunks (DefaultFoldBudget); each chunk appends its changes, and since each change carries its own
// WAL entry and place in it, the chunks need no order among themselves. Its columns, as in every destination
// (the README's "History tables"): the stream's data columns, typed as the table's (a delete holds its key and
// NULLs), then
//
//	_SKIPPR_OP                   VARCHAR          insert, update, delete or snapshot
//	_SKIPPR_SOURCE_COMMITTED_AT  TIMESTAMP_TZ(9)  the change's source commit time (NULL: unknown, a snapshot row)
//	_SKIPPR_POSITION             NUMBER(20,0)     the WAL entry that carried the change
//	_SKIPPR_SEQ                  NUMBER(10,0)     the change's place among the stream's changes in that entry
//
// with PRIMARY KEY (_SKIPPR_POSITION, _SKIPPR_SEQ) (informational in Snowflake: the fence is what keeps it
// unique). A TRUNCATE empties the table, not its history. Data columns follow the table's: added, renamed and
// widened with it.

// historyTable is the history table of a stream's table t.
func historyTable(t sfsql.Table) sfsql.Table {
	t.Name += sfsql.HistorySuffix
	return t
}

// historyColumns are a history table's own columns, after the data columns.
func historyColumns() []sfsql.Column {
	return []sfsql.Column{
		{Name: sfsql.OpColumn, Type: sfsql.Type{Base: "TEXT"}},
		extraCommitted.column(),
		extraPosition.column(),
		extraSeq.column(),
	}
}

// historyKey is a history table's primary key.
var historyKey = []string{sfsql.PositionColumn, sfsql.SeqColumn}

// historyExtras are the staged columns of a load into a history table.
var historyExtras = []extra{extraOpName, extraCommitted, extraPosition, extraSeq}

// historyMeta is what the INSERT into a history table writes beyond the data columns.
func historyMeta() sfsql.Meta {
	return sfsql.Meta{Sets: []sfsql.Set{
		{Column: sfsql.OpColumn, Value: sfsql.Staged(sfsql.OpNameColumn)},
		{Column: sfsql.SourceCommittedAtColumn, Value: sfsql.Staged(sfsql.SourceCommittedAtColumn)},
		{Column: sfsql.PositionColumn, Value: sfsql.Staged(sfsql.PositionColumn)},
		{Column: sfsql.SeqColumn, Value: sfsql.Staged(sfsql.SeqColumn)},
	}}
}
