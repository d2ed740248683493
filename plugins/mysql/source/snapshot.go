package source

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"vitess.io/vitess/go/mysql"
	"vitess.io/vitess/go/sqltypes"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/plugins/mysql/config"
)

// openSnapshot starts a consistent-snapshot transaction on conn and returns the binlog coordinate and GTID
// position it sees: every transaction committed before the coordinate is in the snapshot, none after it.
//
// MariaDB (and Percona) need no lock: inside START TRANSACTION WITH CONSISTENT SNAPSHOT the status variables
// binlog_snapshot_file/binlog_snapshot_position are the binlog coordinate of that very snapshot. Its GTID
// position must be the same point, and @@gtid_binlog_pos is not: it is read by a later statement, and a
// transaction committing in between would be counted without being in the snapshot. BINLOG_GTID_POS(file,
// pos) maps the snapshot's own coordinate to the GTID position at it, so both name the same point.
//
// MySQL has no such variable: with snapshot_locking: minimal, FLUSH TABLES WITH READ LOCK holds commits for
// the instant of opening the snapshot and reading SHOW BINARY LOG STATUS (SHOW MASTER STATUS before 8.2),
// then UNLOCK TABLES (Debezium's "minimal" mode). With snapshot_locking: none, a MySQL snapshot is refused.
func openSnapshot(conn *mysql.Conn, cfg config.Settings, flavor string) (file string, pos uint64, gtid string, err error) {
	exec := func(q string) (*sqltypes.Result, error) {
		res, err := conn.ExecuteFetch(q, 10_000, true)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", q, cfg.Explain(err))
		}
		return res, nil
	}
	if flavor == flavorMySQL && cfg.SnapshotLocking == config.LockingNone {
		return "", 0, "", fault.ConfigErr(errors.New("snapshot_locking is none, and a MySQL server gives a consistent snapshot's binlog position only under FLUSH TABLES WITH READ LOCK (MariaDB and Percona need no lock)"),
			"set snapshot_locking: minimal (the lock is held only while the snapshot opens), or snapshot: false to stream without a snapshot")
	}
	if _, err := exec("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ"); err != nil {
		return "", 0, "", err
	}
	if flavor == flavorMariaDB {
		if _, err := exec("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY"); err != nil {
			return "", 0, "", err
		}
		res, err := exec("SHOW STATUS LIKE 'binlog_snapshot_%'")
		if err != nil {
			return "", 0, "", err
		}
		for _, row := range res.Rows {
			switch row[0].ToString() {
			case "Binlog_snapshot_file":
				file = row[1].ToString()
			case "Binlog_snapshot_position":
				pos, _ = strconv.ParseUint(row[1].ToString(), 10, 64)
			}
		}
		if file == "" {
			return "", 0, "", fault.ConfigErr(errors.New("the server reports no binlog_snapshot_file: its binary log is off"),
				"enable the binary log: log_bin in the server configuration, then restart the server")
		}
		g, err := exec("SELECT BINLOG_GTID_POS(" + sqltypes.EncodeStringSQL(file) + ", " + strconv.FormatUint(pos, 10) + ")")
		if err != nil {
			return "", 0, "", err
		}
		if len(g.Rows) == 1 && !g.Rows[0][0].IsNull() {
			gtid = g.Rows[0][0].ToString()
		}
		return file, pos, gtid, nil
	}
	if _, err := exec("FLUSH TABLES WITH READ LOCK"); err != nil {
		return "", 0, "", fault.ConfigErr(err, fmt.Sprintf("GRANT RELOAD ON *.* TO '%s' (for the instant of the snapshot's lock), or set snapshot: false", cfg.User))
	}
	defer func() {
		if _, uerr := conn.ExecuteFetch("UNLOCK TABLES", 0, false); uerr != nil && err == nil {
			err = fmt.Errorf("UNLOCK TABLES: %w", cfg.Explain(uerr))
		}
	}()
	if _, err := exec("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY"); err != nil {
		return "", 0, "", err
	}
	file, pos, gtid, err = binlogStatus(conn, flavor)
	return file, pos, gtid, err
}

// binlogStatus reads where the binary log ends now, and the GTID position there.
func binlogStatus(conn *mysql.Conn, flavor string) (string, uint64, string, error) {
	res, err := statusQuery(conn, flavor)
	if err != nil {
		return "", 0, "", err
	}
	if len(res.Rows) == 0 {
		return "", 0, "", fault.ConfigErr(errors.New("the server reports no binary log status: its binary log is off"),
			"enable the binary log: log_bin in the server configuration, then restart the server")
	}
	file, pos, gtid := parseBinlogStatus(res)
	if flavor == flavorMariaDB {
		g, err := conn.ExecuteFetch("SELECT BINLOG_GTID_POS("+sqltypes.EncodeStringSQL(file)+", "+strconv.FormatUint(pos, 10)+")", 1, false)
		if err != nil {
			return "", 0, "", err
		}
		gtid = ""
		if len(g.Rows) == 1 && !g.Rows[0][0].IsNull() {
			gtid = g.Rows[0][0].ToString()
		}
	}
	return file, pos, gtid, nil
}

// statusQuery runs SHOW BINARY LOG STATUS (MySQL 8.2+, where SHOW MASTER STATUS is gone in 8.4) or SHOW
// MASTER STATUS (MariaDB, older MySQL).
func statusQuery(conn *mysql.Conn, flavor string) (*sqltypes.Result, error) {
	if flavor == flavorMySQL {
		if res, err := conn.ExecuteFetch("SHOW BINARY LOG STATUS", 10, true); err == nil {
			return res, nil
		}
	}
	return conn.ExecuteFetch("SHOW MASTER STATUS", 10, true)
}

// parseBinlogStatus reads File, Position and (MySQL) Executed_Gtid_Set from a status result by column name.
func parseBinlogStatus(res *sqltypes.Result) (file string, pos uint64, gtid string) {
	for i, f := range res.Fields {
		v := res.Rows[0][i].ToString()
		switch f.Name {
		case "File":
			file = v
		case "Position":
			pos, _ = strconv.ParseUint(v, 10, 64)
		case "Executed_Gtid_Set":
			// MySQL wraps long sets over lines.
			gtid = strings.ReplaceAll(strings.ReplaceAll(v, "\n", ""), " ", "")
		}
	}
	return file, pos, gtid
}

// snapshot copies the tables in primary-key order, batch_size rows at a time, with a checkpoint after each
// chunk, and returns the stream position that follows it. fresh says pos is new: its coordinate is this
// snapshot's. A resumed copy (after a crash, the first snapshot's transaction is gone) continues from each
// table's last key under a new snapshot: streaming still starts at the first snapshot's coordinate and
// replays every change after it, and replaying a change over a newer row converges to the same row (upserts
// and deletes by key, in commit order); Overlap marks where inserts must be sent as upserts.
func (r *reader) snapshot(ctx context.Context, conn *mysql.Conn, pos *Position, fresh bool) (*Position, error) {
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	file, at, gtid, err := openSnapshot(conn, r.cfg, r.flavor)
	if err != nil {
		return nil, ctxErr(ctx, err)
	}
	defer conn.ExecuteFetch("ROLLBACK", 0, false)
	if fresh {
		pos.File, pos.Pos, pos.GTID = file, at, gtid
		r.log.Info("snapshot opened", "file", file, "pos", at, "gtid", gtid)
	} else {
		// Nothing written since the first snapshot: the copy holds nothing streaming will replay, and the
		// checkpoints stay those of the first copy, byte for byte.
		if before(pos.File, pos.Pos, file, at) && before(pos.OverlapFile, pos.OverlapPos, file, at) {
			pos.OverlapFile, pos.OverlapPos = file, at
		}
		r.log.Info("resuming the snapshot under a new snapshot", "rows_done", pos.Rows, "file", file, "pos", at)
	}
	if pos.Progress == nil {
		pos.Progress = map[string]TableProgress{}
	}
	for _, t := range r.order {
		for !pos.Progress[t.Name].Done {
			if err := r.chunk(ctx, conn, t, pos); err != nil {
				return nil, ctxErr(ctx, err)
			}
		}
	}
	next := &Position{V: positionVersion, Phase: PhaseStream, Flavor: pos.Flavor, File: pos.File, Pos: pos.Pos, GTID: pos.GTID,
		Tables: pos.Tables, OverlapFile: pos.OverlapFile, OverlapPos: pos.OverlapPos, Schemas: pos.Schemas}
	if err := r.out.Checkpoint(ctx, serve.Checkpoint{Position: next.Encode(), RowsDone: pos.Rows, RowsTotal: pos.Rows}); err != nil {
		return nil, err
	}
	r.log.Info("snapshot done", "rows", pos.Rows)
	return next, nil
}

// ctxErr prefers the context's error: a cancelled Read closes its connection, and the query then fails.
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// chunk copies the next batch_size rows of t after its last key, emits them and a checkpoint.
func (r *reader) chunk(ctx context.Context, conn *mysql.Conn, t *Table, pos *Position) error {
	prog := pos.Progress[t.Name]
	cols := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		cols[i] = config.QuoteIdent(c.Name)
		if c.Kind == KindFloat32 {
			// FLOAT's text form is rounded to 6 digits; as a double it is exact, as in the binary log.
			cols[i] = "CAST(" + cols[i] + " AS DOUBLE)"
		}
	}
	keys := make([]string, len(t.Key))
	for i, k := range t.Key {
		keys[i] = config.QuoteIdent(t.Columns[k].Name)
	}
	q := "SELECT " + strings.Join(cols, ", ") + " FROM " + config.QuoteIdent(r.cfg.Database) + "." + config.QuoteIdent(t.Name)
	if prog.Key != nil {
		cond, err := afterKey(t, prog.Key)
		if err != nil {
			return fault.ResnapshotErr(err, "start the pipeline from an empty checkpoint (a new snapshot)")
		}
		q += " WHERE " + cond
	}
	// One row more than a chunk says whether this chunk is the table's last, so the checkpoint that carries
	// its rows already says the copy is done: the engine makes durable only checkpoints with rows, and a
	// restart from one saying "not done" would need the table's columns as they were (DDL may follow).
	q += " ORDER BY " + strings.Join(keys, ", ") + " LIMIT " + strconv.Itoa(r.cfg.BatchSize+1)
	res, err := conn.ExecuteFetch(q, r.cfg.BatchSize+1, false)
	if err != nil {
		return fmt.Errorf("copy %s: %w", t.Stream, r.cfg.Explain(err))
	}
	more := len(res.Rows) > r.cfg.BatchSize
	if more {
		res.Rows = res.Rows[:r.cfg.BatchSize]
	}
	if len(res.Rows) > 0 {
		rb := array.NewRecordBuilder(memory.DefaultAllocator, t.Schema)
		defer rb.Release()
		for _, row := range res.Rows {
			if err := r.appendRow(rb, t, row, change.OpRead, ""); err != nil {
				return err
			}
		}
		rec := rb.NewRecordBatch()
		err := r.out.Batch(ctx, t.Stream, rec)
		rec.Release()
		if err != nil {
			return err
		}
		last := res.Rows[len(res.Rows)-1]
		prog.Key = make([]string, len(t.Key))
		for i, k := range t.Key {
			prog.Key[i] = keyText(&t.Columns[k], last[k].Raw())
		}
	}
	prog.Rows += int64(len(res.Rows))
	pos.Rows += int64(len(res.Rows))
	prog.Done = !more
	pos.Progress[t.Name] = prog
	pos.Table = t.Name
	return r.out.Checkpoint(ctx, serve.Checkpoint{Position: pos.Encode(), RowsDone: pos.Rows})
}

// appendRow appends one row of text values (from a snapshot query) to rb.
func (r *reader) appendRow(rb *array.RecordBuilder, t *Table, row []sqltypes.Value, op change.Op, where string) error {
	for i := range t.Columns {
		b := rb.Field(i)
		if row[i].IsNull() {
			b.AppendNull()
			continue
		}
		if err := appendValue(b, &t.Columns[i], row[i].Raw(), false, r.cfg.ZeroDate == config.ZeroDateNull); err != nil {
			return valueErr(t, err)
		}
	}
	rb.Field(len(t.Columns)).(*array.Int8Builder).Append(int8(op))
	if where == "" {
		rb.Field(len(t.Columns) + 1).AppendNull()
	} else {
		rb.Field(len(t.Columns) + 1).(*array.StringBuilder).Append(where)
	}
	return nil
}

// valueErr classifies a value error: a policy refusal is a data error naming the setting, anything else a
// plain error (a decoding bug must not look like the user's data).
func valueErr(t *Table, err error) error {
	var ve *valueError
	if errors.As(err, &ve) {
		return fault.DataErr(fmt.Errorf("table %s: %w", t.Stream, err), "change the value in the source, or the setting the message names")
	}
	return fmt.Errorf("table %s: %w", t.Stream, err)
}

// keyText is how a key value is kept in a checkpoint: its text, hex for binary columns.
func keyText(c *Column, raw []byte) string {
	if c.Kind == KindBinary || c.Kind == KindBit {
		return hex.EncodeToString(raw)
	}
	return string(raw)
}

// literal is a key value as SQL: numbers inline (a quoted number would be compared as a double, wrong above
// 2^53), binary as X'..', the rest quoted.
func literal(c *Column, text string) (string, error) {
	switch c.Kind {
	case KindInt8, KindInt16, KindInt32, KindInt64, KindYear, KindUint8, KindUint16, KindUint32, KindUint64, KindDecimal128, KindDecimal256, KindFloat32, KindFloat64:
		if _, err := strconv.ParseFloat(text, 64); err != nil {
			return "", fmt.Errorf("checkpoint key %q of column %s is not a number", text, c.Name)
		}
		return text, nil
	case KindBinary, KindBit:
		if _, err := hex.DecodeString(text); err != nil {
			return "", fmt.Errorf("checkpoint key %q of column %s is not hex", text, c.Name)
		}
		return "X'" + text + "'", nil
	}
	return sqltypes.EncodeStringSQL(text), nil
}

// afterKey is the condition "key > last" over a composite key, spelled out as (a > x) OR (a = x AND b > y)
// so that the range optimizer uses the primary key.
func afterKey(t *Table, last []string) (string, error) {
	if len(last) != len(t.Key) {
		return "", fmt.Errorf("checkpoint key %v of %s has %d values, the primary key %d columns", last, t.Stream, len(last), len(t.Key))
	}
	lits := make([]string, len(last))
	for i, k := range t.Key {
		l, err := literal(&t.Columns[k], last[i])
		if err != nil {
			return "", err
		}
		lits[i] = l
	}
	var ors []string
	for i := range t.Key {
		var ands []string
		for j := 0; j < i; j++ {
			ands = append(ands, config.QuoteIdent(t.Columns[t.Key[j]].Name)+" = "+lits[j])
		}
		ands = append(ands, config.QuoteIdent(t.Columns[t.Key[i]].Name)+" > "+lits[i])
		ors = append(ors, "("+strings.Join(ands, " AND ")+")")
	}
	return strings.Join(ors, " OR "), nil
}
