package source

import (
	"fmt"
	"regexp"

	"vitess.io/vitess/go/mysql"
	"vitess.io/vitess/go/vt/sqlparser"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
)

// The server settings that make the binary log carry whole rows (binlog_format=ROW, binlog_row_image=FULL,
// binlog_row_metadata=FULL) are checked at start (Check), but all three are dynamic: an administrator can switch
// them while a pipeline streams, and sessions opened afterwards write their changes the new way. This file
// recognises such changes of a captured table at the event that carries them and stops the Read there, before
// that event's rows (or any later one's) reach a checkpoint.
//
// The fault is a re-snapshot, not a configuration error: the event stays in the binary log in the form it was
// written, so a restart from the last checkpoint, even with the setting restored, meets it again; only a new
// snapshot taken after the setting is restored gets past it without a gap.

// dmlRe finds statements that change rows. In statement (or mixed) format the server logs them as query
// events instead of row events.
var dmlRe = regexp.MustCompile(`(?is)^\s*(?:/\*.*?\*/\s*)*(INSERT|UPDATE|DELETE|REPLACE|LOAD\s+DATA|LOAD\s+XML)\b`)

// dmlTables returns the captured tables a row-changing statement names (in statement order), and
// whether the statement changes rows at all. A statement the parser cannot read counts as naming the captured
// tables its text mentions: a false stop is recoverable, a missed change is not.
func (h *history) dmlTables(defaultDB, sql string) ([]string, bool) {
	if !dmlRe.MatchString(sql) {
		return nil, false
	}
	st, err := h.parser.Parse(sql)
	if err != nil {
		var out []string
		for _, name := range h.names {
			if h.mentionsTable(defaultDB, sql, name) {
				out = append(out, name)
			}
		}
		return out, true
	}
	var out []string
	seen := map[string]bool{}
	_ = sqlparser.Walk(func(n sqlparser.SQLNode) (bool, error) {
		if tn, ok := n.(sqlparser.TableName); ok {
			if name := h.ours(tn, defaultDB); name != "" && !seen[name] {
				seen[name] = true
				out = append(out, name)
			}
		}
		return true, nil
	}, st)
	return out, true
}

// statementFix is what a user does when changes arrived as statements.
const statementFix = "SET GLOBAL binlog_format = 'ROW' (and binlog_format=ROW in the server configuration; sessions opened before keep their own format until they reconnect), " +
	"then start the pipeline from an empty checkpoint (a new snapshot): the changes from the position named on are in the binary log as statements, which a binlog reader cannot turn into rows"

// checkStatement refuses a query event that changes a captured table's rows: binlog_format is no longer ROW
// (STATEMENT, or MIXED choosing statement form) for the session that wrote it.
func (s *streamer) checkStatement(db, sql string, next uint64) error {
	tables, dml := s.hist.dmlTables(db, sql)
	if !dml || len(tables) == 0 {
		return nil
	}
	return fault.ResnapshotErr(fmt.Errorf("table %s changes as a statement, not as rows, in the binary log at %s:%d (transaction %s): binlog_format is no longer ROW (STATEMENT or MIXED), so the changes from %s on cannot be read; nothing after %s was emitted: %s",
		s.cfg.Stream(tables[0]), s.file, next, s.txnName(), s.where(), s.where(), clip(sql)), statementFix)
}

// checkImage refuses a rows event of a captured table whose images lack columns (binlog_row_image MINIMAL or
// NOBLOB): the rows it changes cannot be made whole.
func (s *streamer) checkImage(ev mysql.BinlogEvent, t *Table, rows *mysql.Rows) error {
	n := len(t.Columns)
	full := func(b *mysql.Bitmap) bool {
		for c := range n {
			if !b.Bit(c) {
				return false
			}
		}
		return true
	}
	var missing *mysql.Bitmap
	switch {
	case (ev.IsDeleteRows() || ev.IsUpdateRows()) && !full(&rows.IdentifyColumns):
		missing = &rows.IdentifyColumns
	case (ev.IsWriteRows() || ev.IsUpdateRows()) && !full(&rows.DataColumns):
		missing = &rows.DataColumns
	default:
		return nil
	}
	var cols []string
	for c := range n {
		if !missing.Bit(c) {
			cols = append(cols, t.Columns[c].Name)
		}
	}
	return fault.ResnapshotErr(fmt.Errorf("table %s has a row image without column(s) %v in the binary log at %s:%d (transaction %s): binlog_row_image is no longer FULL, so the changes from %s on cannot be made whole; nothing after %s was emitted",
		t.Stream, cols, s.file, ev.NextPosition(), s.txnName(), s.where(), s.where()),
		"SET GLOBAL binlog_row_image = 'FULL' (and in the server configuration; sessions opened before keep their own value until they reconnect), then start the pipeline from an empty checkpoint (a new snapshot): the row images from the position named on stay partial in the binary log")
}

// metadataErr refuses a captured table's map without column names (binlog_row_metadata no longer FULL): the
// rows could still be decoded by position, but nothing would catch a schema change the history missed, and
// values would land in the wrong columns silently.
func (s *streamer) metadataErr(ev mysql.BinlogEvent, t *Table) error {
	return fault.ResnapshotErr(fmt.Errorf("the table map of %s in the binary log at %s:%d (transaction %s) carries no column names: binlog_row_metadata is no longer FULL, so the rows from %s on cannot be checked against the schema; nothing after %s was emitted",
		t.Stream, s.file, ev.NextPosition(), s.txnName(), s.where(), s.where()),
		"SET GLOBAL binlog_row_metadata = 'FULL' (and in the server configuration), then start the pipeline from an empty checkpoint (a new snapshot): the table maps from the position named on stay without names in the binary log")
}

// where is the last position every emitted change is before: the end of the last transaction read whole.
func (s *streamer) where() string {
	return fmt.Sprintf("%s:%d (gtid %q)", s.cur.File, s.cur.Pos, s.cur.GTID)
}

func (s *streamer) txnName() string {
	if s.txn == nil {
		return "without a gtid"
	}
	return s.txn.String()
}

// clip shortens a statement for a message.
func clip(sql string) string {
	if len(sql) > 200 {
		return sql[:200] + "…"
	}
	return sql
}
