package source

import (
	"context"
	"fmt"

	"vitess.io/vitess/go/mysql"
	"vitess.io/vitess/go/sqltypes"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugins/mysql/config"
)

// Tables in mode: full_row: no primary key (nor unique NOT NULL key), binlog_row_image=FULL. Their stream is
// matched by full row (change.MatchFullRow): a delete carries the whole old row and removes one equal row at
// the destination; an update goes as a delete of its old row and an insert of its new one.
//
// With no key, nothing converges: a change applied twice leaves a duplicate row. So such a table is copied
// exactly: every row reaches the destination once, in the copy or in the stream, never both.
//
//   - Each snapshot reader opens its own consistent snapshot (openSnapshots), and the readers land at
//     different binlog coordinates under writes; streaming starts at the earliest. The coordinate of the
//     snapshot a full_row table is copied under is its copy point, kept in the position (TableProgress.From,
//     then Position.Copied). A transaction committed before that coordinate is in the copy, one committed
//     after it is not (MariaDB's binlog_snapshot_position, or MySQL's instant lock, says exactly that), and a
//     binlog row event lies inside its transaction, so its end position is at or before the copy point
//     exactly when its transaction is in the copy. Streaming drops those events of that table and sends the
//     rest, as inserts (never as the upserts that Overlap makes of other tables' inserts).
//   - A copy resumed after a crash cannot continue such a table where it stopped: it has no key to order and
//     resume by, and the new snapshot is at another point. So an unfinished full_row table is copied again
//     from its start under the new snapshot, after a truncate of its stream (truncate: propagate), so the
//     destination holds no partial copy twice; its copy point becomes the new snapshot's. With truncate set
//     to error or ignore the truncate cannot be sent, and the Read fails with class resnapshot instead.
//   - `skippr resnapshot` (the watermark copy, resnapshot.go) reads a table in key order between watermarks
//     and relies on upserts by key: it is refused for a full_row table (resnapper.Prepare).

// Coord is a binary log coordinate in a checkpoint.
type Coord struct {
	File string `json:"file"`
	Pos  uint64 `json:"pos"`
}

// restartFullRow starts each unfinished full_row table of todo over: the copy of a resumed snapshot cannot
// continue it. A table the interrupted copy had started is truncated first.
func (r *reader) restartFullRow(ctx context.Context, todo []*Table, pos *Position) error {
	for _, t := range todo {
		prog, started := pos.Progress[t.Name]
		if !t.FullRow || !started {
			continue
		}
		if r.cfg.Truncate != config.TruncatePropagate {
			return fault.ResnapshotErr(fmt.Errorf("the snapshot of %s (mode: full_row) was interrupted after %d rows, and a keyless table's copy cannot be resumed; copying it again needs a truncate of the destination's table, which truncate: %s does not send", t.Stream, prog.Rows, r.cfg.Truncate),
				"set the source's truncate: propagate, or start the pipeline from an empty checkpoint (a new snapshot)")
		}
		r.log.Info("copying a full_row table again from its start: its interrupted copy cannot be resumed", "table", t.Name, "rows_done", prog.Rows)
		if err := r.out.Truncate(ctx, t.Stream); err != nil {
			return err
		}
		pos.Rows -= prog.Rows
		delete(pos.Progress, t.Name)
	}
	return nil
}

// copied is the copy points of the full_row tables of a finished snapshot, by table name (nil for none).
func (p *Position) copied() map[string]Coord {
	var out map[string]Coord
	for name, prog := range p.Progress {
		if prog.From == nil {
			continue
		}
		if out == nil {
			out = map[string]Coord{}
		}
		out[name] = *prog.From
	}
	return out
}

// inCopy says a rows event of table name, ending at file:next, belongs to a transaction the table's copy
// already holds.
func (s *streamer) inCopy(name string, next uint64) bool {
	at, ok := s.cur.Copied[name]
	return ok && !before(at.File, at.Pos, s.file, next)
}

// passCopied forgets the copy points streaming has passed.
func (s *streamer) passCopied() {
	for name, at := range s.cur.Copied {
		if !before(s.cur.File, s.cur.Pos, at.File, at.Pos) {
			delete(s.cur.Copied, name)
		}
	}
	if len(s.cur.Copied) == 0 {
		s.cur.Copied = nil
	}
}

// checkFullRow refuses mode: full_row for a table with a unique key over NOT NULL columns (a primary key is
// refused where the table is built): such a key identifies rows, and MySQL uses it as the table's key.
func (r *reader) checkFullRow(conn *mysql.Conn, t *Table) error {
	if !t.FullRow {
		return nil
	}
	db, tn := sqltypes.EncodeStringSQL(r.cfg.Database), sqltypes.EncodeStringSQL(t.Name)
	res, err := conn.ExecuteFetch(`SELECT s.INDEX_NAME FROM information_schema.STATISTICS s
		JOIN information_schema.COLUMNS c ON c.TABLE_SCHEMA = s.TABLE_SCHEMA AND c.TABLE_NAME = s.TABLE_NAME AND c.COLUMN_NAME = s.COLUMN_NAME
		WHERE s.TABLE_SCHEMA = `+db+` AND s.TABLE_NAME = `+tn+` AND s.NON_UNIQUE = 0
		GROUP BY s.INDEX_NAME HAVING SUM(c.IS_NULLABLE = 'YES') = 0 ORDER BY s.INDEX_NAME`, 100, false)
	if err != nil {
		return fmt.Errorf("read unique keys of %s: %w", t.Stream, r.cfg.Explain(err))
	}
	if len(res.Rows) > 0 {
		return fault.ConfigErr(fmt.Errorf("table %s is in mode: full_row but has the unique key %s over NOT NULL columns, which identifies its rows", t.Stream, res.Rows[0][0].ToString()),
			fmt.Sprintf("remove mode: full_row from table_options.%s, and make the key its primary key (ALTER TABLE %s ADD PRIMARY KEY (...))", t.Name, t.Stream))
	}
	return nil
}
