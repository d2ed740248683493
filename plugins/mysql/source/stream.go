package source

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"vitess.io/vitess/go/mysql"
	"vitess.io/vitess/go/mysql/binlog"
	"vitess.io/vitess/go/mysql/replication"
	"vitess.io/vitess/go/mysql/sqlerror"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/plugins/mysql/config"
)

// heartbeatPeriod is how often an idle server sends a heartbeat event; each one lets the reader say it has
// caught up (an idle checkpoint).
const heartbeatPeriod = time.Second

// quietCheckpointEvery bounds how long the position stands still while only transactions on other tables
// pass: a restart then re-reads at most this much of them.
const quietCheckpointEvery = 5 * time.Second

// streamer is the binlog half of a Read.
type streamer struct {
	*reader
	conn   *mysql.Conn
	format mysql.BinlogFormat
	maps   map[uint64]*mysql.TableMap
	file   string // the binlog file being read
	cur    Position
	gtids  replication.Position // GTID position after the last transaction
	txn    replication.GTID     // the open transaction's GTID, nil before one
	// pending rows of one table, flushed when another table's rows come, at batch_size rows and at commit.
	table *Table
	rb    *array.RecordBuilder
	n     int
	// imgs are the row images decode fills, reused from row to row (add decodes the cells into the batch).
	imgs [2][]cell
	// data: rows were emitted since the last checkpoint; moved: the position moved since the last checkpoint.
	data, moved bool
	idleSent    bool
	lastCP      time.Time
	// rs copies tables again between the transactions it streams (resnapshot.go).
	rs *resnapper
	// hasRowMetadata: the server has binlog_row_metadata (MariaDB 10.5+, MySQL 8.0.1+), so a table map without
	// column names means it was switched away from FULL. Older servers never write names.
	hasRowMetadata bool
	// released are the streams of tables captured by a pattern and dropped during this Read (patterns.go);
	// capturedSent: a checkpoint carried the capture set as it is now.
	released     []string
	capturedSent bool
}

// stream reads the binary log from pos and emits each transaction's rows of the captured tables, then a
// checkpoint at its end.
func (r *reader) stream(ctx context.Context, pos *Position) error {
	conn, err := r.cfg.Connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := checkRetained(conn, r, pos); err != nil {
		return err
	}
	s := &streamer{reader: r, conn: conn, maps: map[uint64]*mysql.TableMap{}, file: pos.File, cur: *pos, lastCP: time.Now()}
	s.rs = newResnapper(s, pos.Resnapshot)
	r.hist.copying = func(name string) bool { _, ok := s.rs.c.Progress()[r.cfg.Stream(name)]; return ok }
	if len(r.cfg.Patterns) > 0 {
		r.hist.matches = func(name string) bool {
			return r.cfg.Matches(name) && !(r.cfg.WatermarkDatabase == r.cfg.Database && name == watermarkTable)
		}
	}
	s.cur.Table, s.cur.Progress, s.cur.Rows = "", nil, 0
	defer s.rs.close()
	if err := s.start(); err != nil {
		return err
	}
	if err := s.rs.step(ctx); err != nil {
		return ctxErr(ctx, err)
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	defer func() {
		if s.rb != nil {
			s.rb.Release()
		}
	}()
	r.log.Info("streaming the binary log", "file", pos.File, "pos", pos.Pos, "gtid", pos.GTID, "server_id", r.cfg.ServerID)
	for {
		ev, err := conn.ReadBinlogEvent()
		if err != nil {
			return ctxErr(ctx, explainDump(r, pos, err))
		}
		if err := s.event(ctx, ev); err != nil {
			return ctxErr(ctx, err)
		}
	}
}

// checkRetained refuses to stream from a binlog file the server no longer has: the changes in it are gone,
// and only a new snapshot restores what they held.
func checkRetained(conn *mysql.Conn, r *reader, pos *Position) error {
	res, err := conn.ExecuteFetch("SHOW BINARY LOGS", 100_000, true)
	if err != nil {
		return fault.ConfigErr(fmt.Errorf("SHOW BINARY LOGS: %w", r.cfg.Explain(err)),
			fmt.Sprintf("GRANT BINLOG MONITOR ON *.* TO '%s' (MySQL: REPLICATION CLIENT)", r.cfg.User))
	}
	var names []string
	for _, row := range res.Rows {
		names = append(names, row[0].ToString())
	}
	if slices.Contains(names, pos.File) {
		return nil
	}
	return fault.ResnapshotErr(fmt.Errorf("binary log %s, where this pipeline resumes (gtid %q), is no longer on the server (it keeps %s): the changes since then were purged before they were read",
		pos.File, pos.GTID, strings.Join(names, ", ")),
		"start the pipeline from an empty checkpoint (a new snapshot), and raise binlog_expire_logs_seconds above the longest time the pipeline may be stopped")
}

// explainDump classifies an error of the binlog dump.
func explainDump(r *reader, pos *Position, err error) error {
	var se *sqlerror.SQLError
	if errors.As(err, &se) && sameServerID(se) {
		// Retrying would evict the other reader in turn, and so on for ever: a person must give one of them
		// another id.
		how := "set in the settings"
		fix := "set server_id in this pipeline's source settings to a number no other pipeline, replica or server of this topology uses (1–4294967295)"
		if r.cfg.ServerIDDerived {
			how = "derived from the pipeline's name, host, database and tables: another pipeline of the same name over the same tables, one started by an engine that does not send pipeline names, or a replica may use it too"
			fix += ", or rename this pipeline so it derives another id"
		}
		return fault.ConfigErr(fmt.Errorf("another binlog reader connected to the server with this pipeline's server_id %d (%s), and the server dropped this one: %w", r.cfg.ServerID, how, err), fix)
	}
	if errors.As(err, &se) && se.Number() == sqlerror.ERMasterFatalReadingBinlog {
		return fault.ResnapshotErr(fmt.Errorf("the server cannot send the binary log from %s:%d (gtid %q): %w", pos.File, pos.Pos, pos.GTID, err),
			"start the pipeline from an empty checkpoint (a new snapshot), and raise binlog_expire_logs_seconds above the longest time the pipeline may be stopped")
	}
	if errors.As(err, &se) && (se.Number() == sqlerror.ERSpecifiedAccessDenied || se.Number() == sqlerror.ERAccessDeniedError) {
		return fault.ConfigErr(fmt.Errorf("binlog dump: %w", err), fmt.Sprintf("GRANT REPLICATION SLAVE ON *.* TO '%s'", r.cfg.User))
	}
	return fault.TransientErr(fmt.Errorf("binlog dump from %s:%d: %w", pos.File, pos.Pos, r.cfg.Explain(err)))
}

// errSlaveSameID is MariaDB's ER_SLAVE_SAME_ID: a binlog reader with the same server_id connected, and the
// server ended this one's dump. MySQL reports it as 1236 (ER_MASTER_FATAL_ERROR_READING_BINLOG) with a message
// saying so.
const errSlaveSameID = 4052

func sameServerID(se *sqlerror.SQLError) bool {
	if se.Number() == errSlaveSameID {
		return true
	}
	msg := strings.ToLower(se.Message)
	return se.Number() == sqlerror.ERMasterFatalReadingBinlog && strings.Contains(msg, "same server") && strings.Contains(msg, "id")
}

// start asks the server for the binary log after the position: by GTID when there is one (MariaDB always;
// MySQL with gtid_mode ON), else by file and position.
func (s *streamer) start() error {
	setup := []string{
		// Events arrive with the server's checksum, which StripChecksum removes; without this the server refuses
		// a reader that does not announce it understands checksums.
		"SET @master_binlog_checksum = @@global.binlog_checksum",
		fmt.Sprintf("SET @master_heartbeat_period = %d", heartbeatPeriod.Nanoseconds()),
	}
	if s.flavor == flavorMariaDB {
		setup = append(setup, "SET @mariadb_slave_capability = 4")
	}
	for _, q := range setup {
		if _, err := s.conn.ExecuteFetch(q, 0, false); err != nil {
			return fmt.Errorf("%s: %w", q, s.cfg.Explain(err))
		}
	}
	res, err := s.conn.ExecuteFetch("SHOW GLOBAL VARIABLES LIKE 'binlog_row_metadata'", 10, false)
	if err != nil {
		return fmt.Errorf("SHOW GLOBAL VARIABLES LIKE 'binlog_row_metadata': %w", s.cfg.Explain(err))
	}
	s.hasRowMetadata = len(res.Rows) > 0
	switch {
	case s.flavor == flavorMariaDB:
		if s.gtids, err = replication.ParsePosition(replication.MariadbFlavorID, s.cur.GTID); err != nil {
			return fault.ResnapshotErr(fmt.Errorf("checkpoint gtid %q: %w", s.cur.GTID, err), "start the pipeline from an empty checkpoint (a new snapshot)")
		}
		err = s.conn.SendBinlogDumpGTIDCommand(s.cfg.ServerID, "", 0, s.gtids, 0)
	case s.cur.GTID != "":
		if s.gtids, err = replication.ParsePosition(replication.Mysql56FlavorID, s.cur.GTID); err != nil {
			return fault.ResnapshotErr(fmt.Errorf("checkpoint gtid %q: %w", s.cur.GTID, err), "start the pipeline from an empty checkpoint (a new snapshot)")
		}
		err = s.conn.SendBinlogDumpGTIDCommand(s.cfg.ServerID, "", 4, s.gtids, 0)
	default:
		err = s.conn.SendBinlogDumpCommand(s.cfg.ServerID, s.cur.File, uint32(s.cur.Pos))
	}
	if err != nil {
		return fmt.Errorf("start binlog dump: %w", s.cfg.Explain(err))
	}
	return nil
}

// event handles one binlog event.
func (s *streamer) event(ctx context.Context, ev mysql.BinlogEvent) error {
	if !ev.IsValid() {
		return fmt.Errorf("invalid binlog event after %s:%d", s.file, s.cur.Pos)
	}
	if ev.IsFormatDescription() {
		f, err := ev.Format()
		if err != nil {
			return fmt.Errorf("binlog format description: %w", err)
		}
		s.format = f
		return nil
	}
	if ev.IsRotate() && s.format.IsZero() {
		// The fake rotate a dump starts with comes before the format description; it carries no checksum.
		file, _, err := ev.NextLogFile(mysql.BinlogFormat{HeaderLength: 19})
		if err == nil {
			s.file = file
		}
		return nil
	}
	if s.format.IsZero() {
		return nil
	}
	ev, _, err := ev.StripChecksum(s.format)
	if err != nil {
		return fmt.Errorf("binlog event checksum: %w", err)
	}
	f := s.format
	switch {
	case ev.IsRotate():
		file, _, err := ev.NextLogFile(f)
		if err != nil {
			return fmt.Errorf("binlog rotate: %w", err)
		}
		s.file = file
	case ev.IsHeartbeat():
		return s.idle(ctx)
	case ev.IsGTID():
		g, _, _, _, err := ev.GTID(f)
		if err != nil {
			return fmt.Errorf("binlog gtid event: %w", err)
		}
		s.txn = g
	case ev.IsTableMap():
		tm, err := ev.TableMap(f)
		if err != nil {
			return fmt.Errorf("binlog table map: %w", err)
		}
		s.maps[ev.TableID(f)] = tm
		return s.checkMap(ev, tm)
	case ev.IsPartialUpdateRows():
		return fault.ConfigErr(errors.New("the binary log holds partial JSON updates"),
			"SET GLOBAL binlog_row_value_options = '' (full row images are needed), then restart the pipeline")
	case ev.IsWriteRows() || ev.IsUpdateRows() || ev.IsDeleteRows():
		return s.rows(ctx, ev)
	case ev.IsXID():
		return s.commit(ctx, ev.NextPosition())
	case ev.IsQuery():
		q, err := ev.Query(f)
		if err != nil {
			return fmt.Errorf("binlog query event: %w", err)
		}
		switch strings.ToUpper(strings.TrimSpace(q.SQL)) {
		case "BEGIN":
			return nil
		case "COMMIT":
			return s.commit(ctx, ev.NextPosition())
		}
		if err := s.checkStatement(q.Database, q.SQL, ev.NextPosition()); err != nil {
			return err
		}
		return s.statement(ctx, q.Database, q.SQL, ev.NextPosition())
	}
	return nil
}

// statement follows a statement of the binary log other than BEGIN/COMMIT: each one is a transaction of its
// own, so the position moves past it. DDL on a captured table changes its definition at exactly this point:
// the rows before it were emitted with the old schema, a SchemaChange announces the new one, and the
// checkpoint after it holds the new definition (a restart from it decodes with that one).
func (s *streamer) statement(ctx context.Context, db, sql string, next uint64) error {
	s.adopt(db, sql)
	eff, err := s.hist.apply(db, sql)
	if err != nil {
		return fault.DataErr(fmt.Errorf("the binary log at %s:%d changes a captured table in a way this plugin cannot follow (%w): %s", s.file, next, err, sql),
			"start the pipeline from an empty checkpoint (a new snapshot of the new schema)")
	}
	for _, n := range eff.notes {
		s.log.Warn("schema change: "+n, "statement", sql)
	}
	if eff.shadowed {
		s.cur.Shadows = cloneDefs(s.hist.shadows)
	}
	eff = s.release(eff, sql, next)
	if len(eff.renamedAway) > 0 {
		// Not a truncate: the rows live on under the new name. Nothing after this statement is emitted, and
		// the checkpoint stays before it, so the choice the user makes applies from exactly here.
		var streams, gone, kept []string
		for _, r := range eff.renamedAway {
			from, to, _ := strings.Cut(r, " → ")
			streams, gone, kept = append(streams, s.cfg.Stream(from)), append(gone, from), append(kept, to)
		}
		return fault.ConfigErr(fmt.Errorf("the binary log at %s:%d renames captured table %s to %s, which the pipeline does not capture (%s); the destination's table keeps its rows",
			s.file, next, strings.Join(streams, ", "), strings.Join(kept, ", "), sql),
			fmt.Sprintf("either capture the new name: replace %s by %s in tables (a table added to a streaming pipeline is copied while it streams); or stop capturing it: remove %s from tables (the destination's table keeps the rows it has)",
				strings.Join(gone, ", "), strings.Join(kept, ", "), strings.Join(gone, ", ")))
	}
	s.followRenames(eff, sql, next)
	if eff.none() {
		return s.commit(ctx, next)
	}
	if err := s.flush(ctx); err != nil {
		return err
	}
	for _, name := range eff.emptied {
		if err := s.truncate(ctx, name, sql, next); err != nil {
			return err
		}
		if s.hist.defs[name].Gone {
			s.tables[name] = nil
		}
	}
	for _, name := range eff.changed {
		t, err := s.hist.defs[name].build(name, s.cfg.Stream(name), s.cfg.FullRow(name))
		if err != nil {
			return fault.DataErr(fmt.Errorf("after %s (binary log at %s:%d): %w", sql, s.file, next, err),
				"start the pipeline from an empty checkpoint (a new snapshot of the new schema)")
		}
		hide(s.cfg, t)
		s.tables[name] = t
		if err := s.out.SchemaChange(ctx, t.stream()); err != nil {
			return err
		}
		s.log.Info("schema change followed", "table", t.Stream, "statement", sql, "file", s.file, "pos", next)
	}
	s.data = true
	s.cur.Schemas = cloneDefs(s.hist.defs)
	return s.commit(ctx, next)
}

// followRenames moves the capture set along the statement's renames of captured tables to captured names
// (history.follow): the new name joins it (when only a pattern matched it), and the former one leaves it when
// only a pattern matched it (a name listed in tables stays, as after a DROP TABLE, and is captured again if a
// table of that name is created). The stream goes on under the new name: the statement's schema change for it
// carries the former stream (change.RenamedFromTableMeta), and the rows of the binary log after it are its.
func (s *streamer) followRenames(eff effect, sql string, next uint64) {
	for _, name := range eff.adopted {
		if !slices.Contains(s.cfg.Tables, name) {
			s.cfg.Tables = append(s.cfg.Tables, name)
			s.cur.Tables = append(slices.Clone(s.cur.Tables), name)
		}
	}
	for _, rn := range eff.renamed {
		s.tables[rn.from] = nil
		if s.byPattern(rn.from) {
			s.hist.names = slices.DeleteFunc(s.hist.names, func(n string) bool { return n == rn.from })
			delete(s.hist.defs, rn.from)
			delete(s.tables, rn.from)
			s.cfg.Tables = slices.DeleteFunc(s.cfg.Tables, func(n string) bool { return n == rn.from })
			s.cur.Tables = slices.DeleteFunc(slices.Clone(s.cur.Tables), func(n string) bool { return n == rn.from })
			s.released = append(s.released, s.cfg.Stream(rn.from))
		}
		s.log.Info("captured table renamed to a captured name: its stream goes on under the new name, and destinations rename its table",
			"from", s.cfg.Stream(rn.from), "to", s.cfg.Stream(rn.to), "statement", sql, "file", s.file, "pos", next)
	}
	if len(eff.renamed) > 0 || len(eff.adopted) > 0 {
		s.capturedSent = false
	}
}

// truncate handles a captured table whose rows are gone (TRUNCATE, DROP TABLE, renamed away) by the truncate
// setting.
func (s *streamer) truncate(ctx context.Context, name, sql string, next uint64) error {
	stream := s.cfg.Stream(name)
	switch s.cfg.Truncate {
	case config.TruncateIgnore:
		s.log.Warn("table emptied at the source, skipped (truncate: ignore): the destination keeps the rows", "table", stream, "statement", sql)
		return nil
	case config.TruncateError:
		return fault.DataErr(fmt.Errorf("table %s was emptied at %s:%d (%s), and truncate: error stops here", stream, s.file, next, sql),
			"set the source's truncate: propagate to empty the destination's table too, or truncate: ignore to skip it (the destination keeps its rows), or start the pipeline from an empty checkpoint (a new snapshot)")
	}
	return s.out.Truncate(ctx, stream)
}

// checkMap cross-checks a captured table's map with its definition here: the same number of columns, and
// (binlog_row_metadata=FULL) the same names. A mismatch means the schema history missed a change; decoding
// on would put values in the wrong columns.
func (s *streamer) checkMap(ev mysql.BinlogEvent, tm *mysql.TableMap) error {
	if tm.Database != s.cfg.Database {
		return nil
	}
	t, ok := s.tables[tm.Name]
	if !ok {
		return nil
	}
	fix := "start the pipeline from an empty checkpoint (a new snapshot of the new schema)"
	if t == nil {
		return fault.DataErr(fmt.Errorf("the binary log at %s:%d has rows of table %s.%s, which the schema history says was dropped", s.file, ev.NextPosition(), tm.Database, tm.Name), fix)
	}
	if len(tm.Types) != len(t.Columns) {
		return fault.DataErr(fmt.Errorf("table %s has %d columns in the binary log at %s:%d, %d in the schema history: a schema change was missed", t.Stream, len(tm.Types), s.file, ev.NextPosition(), len(t.Columns)), fix)
	}
	meta, err := optionalMeta(ev, s.format)
	if err != nil {
		return fmt.Errorf("table map of %s at %s:%d: %w", t.Stream, s.file, ev.NextPosition(), err)
	}
	names, err := columnNames(meta)
	if err != nil {
		return fmt.Errorf("table map of %s at %s:%d: %w", t.Stream, s.file, ev.NextPosition(), err)
	}
	if names == nil && s.hasRowMetadata {
		return s.metadataErr(ev, t)
	}
	if err := useMembers(t, meta); err != nil {
		return fmt.Errorf("table map of %s at %s:%d: %w", t.Stream, s.file, ev.NextPosition(), err)
	}
	for i, n := range names {
		if i < len(t.Columns) && !strings.EqualFold(n, t.Columns[i].Name) {
			return fault.DataErr(fmt.Errorf("table %s column %d is %s in the binary log at %s:%d, %s in the schema history: a schema change was missed", t.Stream, i+1, n, s.file, ev.NextPosition(), t.Columns[i].Name), fix)
		}
	}
	return nil
}

// rows appends a rows event's changes of a captured table.
func (s *streamer) rows(ctx context.Context, ev mysql.BinlogEvent) error {
	f := s.format
	tm := s.maps[ev.TableID(f)]
	if tm == nil {
		return fmt.Errorf("binlog rows event at %s:%d for table id %d without a table map", s.file, ev.NextPosition(), ev.TableID(f))
	}
	if s.rs.isMarkTable(tm) {
		return s.rs.marks(ctx, ev, tm)
	}
	if tm.Database != s.cfg.Database {
		return nil
	}
	t := s.tables[tm.Name]
	if t == nil {
		return nil // not captured (a gone one was refused at its table map)
	}
	rows, err := ev.Rows(f, tm)
	if err != nil {
		return fmt.Errorf("binlog rows of %s at %s:%d: %w", t.Stream, s.file, ev.NextPosition(), err)
	}
	// Before any row of the event is added: a partial image stops the Read with none of its rows emitted.
	if err := s.checkImage(ev, t, &rows); err != nil {
		return err
	}
	where := s.file + ":" + fmt.Sprint(ev.NextPosition())
	if s.txn != nil {
		where = s.txn.String()
	}
	// The event header's time: when the statement began on the server, in seconds (the binlog has no finer
	// time, and a transaction's rows come before its commit event).
	at := time.Unix(int64(ev.Timestamp()), 0).UTC()
	insertOp := change.OpInsert
	if t.FullRow {
		// Exact copy (fullrow.go): what the copy holds is dropped, the rest is new rows.
		if s.inCopy(t.Name, ev.NextPosition()) {
			return nil
		}
	} else if s.cur.OverlapFile != "" && before(s.file, ev.NextPosition(), s.cur.OverlapFile, s.cur.OverlapPos) {
		insertOp = change.OpUpdate
	}
	for i := range rows.Rows {
		row := &rows.Rows[i]
		switch {
		case ev.IsWriteRows():
			after, err := s.decode(1, t, tm, &rows.DataColumns, &row.NullColumns, row.Data)
			if err != nil {
				return err
			}
			if in, err := s.keep(ctx, t, tm, after); err != nil {
				return err
			} else if !in {
				continue
			}
			if err := s.add(ctx, t, tm, after, insertOp, where, at); err != nil {
				return err
			}
		case ev.IsDeleteRows():
			before, err := s.decode(0, t, tm, &rows.IdentifyColumns, &row.NullIdentifyColumns, row.Identify)
			if err != nil {
				return err
			}
			if in, err := s.keep(ctx, t, tm, before); err != nil {
				return err
			} else if !in {
				continue
			}
			if err := s.add(ctx, t, tm, before, change.OpDelete, where, at); err != nil {
				return err
			}
		default:
			before, err := s.decode(0, t, tm, &rows.IdentifyColumns, &row.NullIdentifyColumns, row.Identify)
			if err != nil {
				return err
			}
			after, err := s.decode(1, t, tm, &rows.DataColumns, &row.NullColumns, row.Data)
			if err != nil {
				return err
			}
			// The row filter (rowfilter.go): a row moving out is a delete, one moving in an insert.
			wasIn, err := s.keep(ctx, t, tm, before)
			if err != nil {
				return err
			}
			isIn, err := s.keep(ctx, t, tm, after)
			if err != nil {
				return err
			}
			switch {
			case !wasIn && !isIn:
				continue
			case wasIn && !isIn:
				if err := s.add(ctx, t, tm, before, change.OpDelete, where, at); err != nil {
					return err
				}
				continue
			case !wasIn && isIn:
				if err := s.add(ctx, t, tm, after, insertOp, where, at); err != nil {
					return err
				}
				continue
			}
			if t.FullRow || keyChanged(t, before, after) {
				// full_row: the old row is matched whole and goes, the new one comes (fullrow.go).
				// A new key is a new row: the old one goes, the new one comes.
				if err := s.add(ctx, t, tm, before, change.OpDelete, where, at); err != nil {
					return err
				}
				if err := s.add(ctx, t, tm, after, insertOp, where, at); err != nil {
					return err
				}
				continue
			}
			if err := s.add(ctx, t, tm, after, change.OpUpdate, where, at); err != nil {
				return err
			}
		}
	}
	return nil
}

// keyChanged compares the key cells' binary forms: MySQL's row format writes one value one way.
func keyChanged(t *Table, before, after []cell) bool {
	for _, k := range t.Key {
		if before[k].null != after[k].null || !bytes.Equal(before[k].b, after[k].b) {
			return true
		}
	}
	return false
}

// decode splits one row image into s.imgs[img]: the bytes of each column's cell, or null. Every column
// must be present (binlog_row_image=FULL): a partial image cannot make a whole row. The cells are decoded
// only as add appends them.
func (s *streamer) decode(img int, t *Table, tm *mysql.TableMap, cols, nulls *mysql.Bitmap, data []byte) ([]cell, error) {
	out := slices.Grow(s.imgs[img][:0], len(t.Columns))[:len(t.Columns)]
	s.imgs[img] = out
	pos, present := 0, 0
	for c := range t.Columns {
		if !cols.Bit(c) {
			return nil, fault.ConfigErr(fmt.Errorf("table %s: the binary log at %s has a row image without column %s", t.Stream, s.file, t.Columns[c].Name),
				"SET GLOBAL binlog_row_image = FULL (and in the server configuration), then restart the pipeline")
		}
		if nulls.Bit(present) {
			out[c] = cell{null: true}
			present++
			continue
		}
		present++
		l, err := binlog.CellLength(data, pos, tm.Types[c], tm.Metadata[c])
		if err != nil {
			return nil, fmt.Errorf("table %s column %s: decode binlog value: %w", t.Stream, t.Columns[c].Name, err)
		}
		if pos+l > len(data) {
			return nil, fmt.Errorf("table %s column %s: decode binlog value: %d bytes at byte %d of a %d-byte row image", t.Stream, t.Columns[c].Name, l, pos, len(data))
		}
		out[c] = cell{b: data[pos : pos+l]}
		pos += l
	}
	return out, nil
}

// add appends one change row, flushing first when it belongs to another table or the batch is full.
func (s *streamer) add(ctx context.Context, t *Table, tm *mysql.TableMap, row []cell, op change.Op, where string, at time.Time) error {
	if s.table != t {
		if err := s.flush(ctx); err != nil {
			return err
		}
		if s.rb != nil {
			s.rb.Release()
		}
		s.table, s.rb = t, array.NewRecordBuilder(s.mem, t.Schema)
	}
	for i := range t.Columns {
		b := s.rb.Field(i)
		if row[i].null {
			b.AppendNull()
			continue
		}
		if err := appendCell(b, &t.Columns[i], tm.Types[i], tm.Metadata[i], row[i].b, s.cfg.ZeroDate == config.ZeroDateNull); err != nil {
			return valueErr(t, err)
		}
	}
	s.rb.Field(len(t.Columns)).(*array.Int8Builder).Append(int8(op))
	s.rb.Field(len(t.Columns) + 1).(*array.StringBuilder).Append(where)
	s.rb.Field(len(t.Columns) + 2).(*array.TimestampBuilder).Append(arrow.Timestamp(at.UnixMicro()))
	s.n++
	if s.n >= s.cfg.BatchSize {
		return s.flush(ctx)
	}
	return nil
}

// flush emits the pending rows.
func (s *streamer) flush(ctx context.Context) error {
	if s.n == 0 {
		return nil
	}
	rec := s.rb.NewRecordBatch()
	defer rec.Release()
	s.n = 0
	s.data = true
	s.rs.saw(s.table, rec)
	return s.out.Batch(ctx, s.table.Stream, rec)
}

// commit ends a transaction at binlog position next: its rows are emitted, then a checkpoint after it (for a
// transaction without captured rows, at most every quietCheckpointEvery).
func (s *streamer) commit(ctx context.Context, next uint64) error {
	if err := s.flush(ctx); err != nil {
		return err
	}
	if s.txn != nil {
		s.gtids = replication.AppendGTID(s.gtids, s.txn)
		s.cur.GTID = s.gtids.String()
		s.txn = nil
	}
	s.cur.File, s.cur.Pos = s.file, next
	if s.cur.OverlapFile != "" && !before(s.cur.File, s.cur.Pos, s.cur.OverlapFile, s.cur.OverlapPos) {
		s.cur.OverlapFile, s.cur.OverlapPos = "", 0
	}
	s.passCopied()
	s.moved = true
	if s.data || time.Since(s.lastCP) >= quietCheckpointEvery {
		if err := s.checkpoint(ctx, false); err != nil {
			return err
		}
	}
	return s.rs.step(ctx)
}

func (s *streamer) checkpoint(ctx context.Context, idle bool) error {
	s.data, s.moved, s.lastCP = false, false, time.Now()
	// While a table is copied again the source is never idle: `sync --once` waits for the end mark.
	idle = idle && !s.rs.active()
	s.idleSent = idle
	s.cur.Resnapshot = s.rs.snapshot()
	return s.out.Checkpoint(ctx, serve.Checkpoint{Position: s.cur.Encode(), Idle: idle, Metrics: append(s.rs.metrics(), s.capturedMetrics()...)})
}

// idle handles a heartbeat: the reader has caught up. The first heartbeat after anything happened emits an
// idle checkpoint (for `sync --once`, and to move the position over other tables' transactions).
func (s *streamer) idle(ctx context.Context) error {
	if s.txn != nil || s.n > 0 {
		return nil
	}
	if s.rs.active() {
		return s.rs.heartbeat(ctx)
	}
	if s.idleSent && !s.moved && !s.data {
		return nil
	}
	return s.checkpoint(ctx, true)
}
