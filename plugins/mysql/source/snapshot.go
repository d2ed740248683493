package source

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"vitess.io/vitess/go/mysql"
	"vitess.io/vitess/go/sqltypes"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/plugins/mysql/config"
)

// openSnapshots starts a consistent-snapshot transaction on each of conns (the first and the parallel
// readers' others) and returns the binlog coordinate each one sees, and the GTID position at the earliest:
// every transaction committed before a snapshot's coordinate is in that snapshot, none after it.
//
// MariaDB (and Percona) need no lock: inside START TRANSACTION WITH CONSISTENT SNAPSHOT the status variables
// binlog_snapshot_file/binlog_snapshot_position are the binlog coordinate of that very snapshot (InnoDB and
// the binary log commit in one order). Two snapshots at the same coordinate therefore see the same
// transactions; under writes the parallel readers' snapshots, opened one after the other, may land a few
// transactions apart, and the caller reconciles them the way a resumed copy is reconciled (streaming starts
// at the earliest, inserts travel as upserts up to the latest). MariaDB has no way to hand one snapshot to
// another session (Percona's START TRANSACTION WITH CONSISTENT SNAPSHOT FROM SESSION, PostgreSQL's
// pg_export_snapshot), and taking a global lock just to align them would need RELOAD and stall every writer.
// The GTID position must be the earliest coordinate's, and @@gtid_binlog_pos is not: it is read by a later
// statement, and a transaction committing in between would be counted without being in the snapshot.
// BINLOG_GTID_POS(file, pos) maps the coordinate to the GTID position at it, so both name the same point.
//
// MySQL has no such variable: with snapshot_locking: minimal, FLUSH TABLES WITH READ LOCK holds commits for
// the instant of opening every snapshot and reading SHOW BINARY LOG STATUS (SHOW MASTER STATUS before 8.2),
// then UNLOCK TABLES (Debezium's "minimal" mode): all snapshots see the same point. With snapshot_locking:
// none, a MySQL snapshot is refused.
func openSnapshots(conns []*mysql.Conn, cfg config.Settings, flavor string) (at []coord, gtid string, err error) {
	if flavor == flavorMySQL && cfg.SnapshotLocking == config.LockingNone {
		return nil, "", fault.ConfigErr(errors.New("snapshot_locking is none, and a MySQL server gives a consistent snapshot's binlog position only under FLUSH TABLES WITH READ LOCK (MariaDB and Percona need no lock); a lock-free (watermark) snapshot is not built"),
			"set snapshot_locking: minimal (the lock is held only while the snapshot opens, and needs GRANT RELOAD), or snapshot: false to stream without a snapshot")
	}
	exec := func(conn *mysql.Conn, q string) (*sqltypes.Result, error) {
		res, err := conn.ExecuteFetch(q, 10_000, true)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", q, cfg.Explain(err))
		}
		return res, nil
	}
	begin := func() error {
		for _, c := range conns {
			if _, err := exec(c, "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ"); err != nil {
				return err
			}
		}
		for _, c := range conns {
			if _, err := exec(c, "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY"); err != nil {
				return err
			}
		}
		return nil
	}
	if flavor == flavorMariaDB {
		if err := begin(); err != nil {
			return nil, "", err
		}
		at = make([]coord, len(conns))
		for i, c := range conns {
			res, err := exec(c, "SHOW STATUS LIKE 'binlog_snapshot_%'")
			if err != nil {
				return nil, "", err
			}
			for _, row := range res.Rows {
				switch row[0].ToString() {
				case "Binlog_snapshot_file":
					at[i].file = row[1].ToString()
				case "Binlog_snapshot_position":
					at[i].pos, _ = strconv.ParseUint(row[1].ToString(), 10, 64)
				}
			}
			if at[i].file == "" {
				return nil, "", fault.ConfigErr(errors.New("the server reports no binlog_snapshot_file: its binary log is off"),
					"enable the binary log: log_bin in the server configuration, then restart the server")
			}
		}
		first := earliest(at)
		g, err := exec(conns[0], "SELECT BINLOG_GTID_POS("+sqltypes.EncodeStringSQL(first.file)+", "+strconv.FormatUint(first.pos, 10)+")")
		if err != nil {
			return nil, "", err
		}
		if len(g.Rows) == 1 && !g.Rows[0][0].IsNull() {
			gtid = g.Rows[0][0].ToString()
		}
		return at, gtid, nil
	}
	if _, err := exec(conns[0], "FLUSH TABLES WITH READ LOCK"); err != nil {
		return nil, "", fault.ConfigErr(err, fmt.Sprintf("GRANT RELOAD ON *.* TO '%s' (for the instant of the snapshot's lock), or set snapshot: false", cfg.User))
	}
	defer func() {
		if _, uerr := conns[0].ExecuteFetch("UNLOCK TABLES", 0, false); uerr != nil && err == nil {
			err = fmt.Errorf("UNLOCK TABLES: %w", cfg.Explain(uerr))
		}
	}()
	if err := begin(); err != nil {
		return nil, "", err
	}
	file, pos, gtid, err := binlogStatus(conns[0], flavor)
	if err != nil {
		return nil, "", err
	}
	at = make([]coord, len(conns))
	for i := range at {
		at[i] = coord{file, pos}
	}
	return at, gtid, nil
}

// coord is a binary log coordinate.
type coord struct {
	file string
	pos  uint64
}

// earliest and latest of a non-empty list of coordinates.
func earliest(cs []coord) coord {
	m := cs[0]
	for _, c := range cs[1:] {
		if before(c.file, c.pos, m.file, m.pos) {
			m = c
		}
	}
	return m
}

func latest(cs []coord) coord {
	m := cs[0]
	for _, c := range cs[1:] {
		if before(m.file, m.pos, c.file, c.pos) {
			m = c
		}
	}
	return m
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

// snapshot copies the tables in primary-key order, snapshot_parallel at a time, batch_size rows per chunk
// with a checkpoint after each, and returns the stream position that follows it. fresh says pos is new: its
// coordinate is this snapshot's. A resumed copy (after a crash, the first snapshot's transactions are gone)
// continues from each table's last key under new snapshots: streaming still starts at the first snapshot's
// coordinate and replays every change after it, and replaying a change over a newer row converges to the
// same row (upserts and deletes by key, in commit order); Overlap marks where inserts must be sent as upserts.
// The parallel readers' snapshots are reconciled the same way when they did not land on one coordinate
// (openSnapshots): streaming starts at the earliest, Overlap is the latest.
func (r *reader) snapshot(ctx context.Context, conn *mysql.Conn, pos *Position, fresh bool) (*Position, error) {
	if pos.Progress == nil {
		pos.Progress = map[string]TableProgress{}
	}
	var todo []*Table
	for _, t := range r.order {
		if !pos.Progress[t.Name].Done {
			todo = append(todo, t)
		}
	}
	conns := []*mysql.Conn{conn}
	defer func() {
		for _, c := range conns[1:] {
			c.Close()
		}
	}()
	for len(conns) < min(r.cfg.SnapshotParallel, max(len(todo), 1)) {
		c, err := r.cfg.Connect(ctx)
		if err != nil {
			return nil, fmt.Errorf("connect a parallel snapshot reader: %w", err)
		}
		conns = append(conns, c)
	}
	// A cancelled Read closes the connections: a reader blocked on the server then returns.
	stop := context.AfterFunc(ctx, func() {
		for _, c := range conns {
			c.Close()
		}
	})
	defer stop()
	for _, c := range conns {
		// A reader waits while the others' chunks are sent (and while the engine is busy): the server must
		// not give up on a result it is writing meanwhile (net_write_timeout, 60 s by default).
		if _, err := c.ExecuteFetch("SET SESSION net_write_timeout = 86400", 0, false); err != nil {
			return nil, ctxErr(ctx, fmt.Errorf("SET SESSION net_write_timeout: %w", r.cfg.Explain(err)))
		}
	}
	at, gtid, err := openSnapshots(conns, r.cfg, r.flavor)
	if err != nil {
		return nil, ctxErr(ctx, err)
	}
	defer func() {
		for _, c := range conns {
			c.ExecuteFetch("ROLLBACK", 0, false)
		}
	}()
	if fresh {
		r.log.Info("snapshot opened", "file", earliest(at).file, "pos", earliest(at).pos, "gtid", gtid, "readers", len(conns))
	} else {
		r.log.Info("resuming the snapshot under a new snapshot", "rows_done", pos.Rows, "file", latest(at).file, "pos", latest(at).pos, "readers", len(conns))
	}
	if reconcile(pos, at, gtid, fresh) && fresh {
		r.log.Info("the parallel readers' snapshots are apart: inserts up to the latest go as upserts", "latest_file", latest(at).file, "latest_pos", latest(at).pos)
	}
	if !fresh {
		if err := r.restartFullRow(ctx, todo, pos); err != nil {
			return nil, err
		}
	}
	if err := r.copyTables(ctx, conns, at, todo, pos); err != nil {
		return nil, ctxErr(ctx, err)
	}
	next := pos.streamPhase()
	if err := r.out.Checkpoint(ctx, serve.Checkpoint{Position: next.Encode(), RowsDone: pos.Rows, RowsTotal: pos.Rows}); err != nil {
		return nil, err
	}
	r.log.Info("snapshot done", "rows", pos.Rows)
	return next, nil
}

// reconcile sets where streaming starts after a copy whose readers' snapshots are at coordinates at (gtid is
// the GTID position at the earliest): a fresh copy streams from the earliest, so no reader's table misses a
// change; when a snapshot is later than where streaming starts (another reader's, or a resumed copy's), the
// latest becomes the overlap, up to which inserts travel as upserts. It reports whether it set the overlap.
// Nothing written since the first snapshot leaves the position as it was: the copy holds nothing streaming
// will replay, and a replay's checkpoints stay those of the first copy, byte for byte.
func reconcile(pos *Position, at []coord, gtid string, fresh bool) bool {
	if fresh {
		first := earliest(at)
		pos.File, pos.Pos, pos.GTID = first.file, first.pos, gtid
	}
	last := latest(at)
	if before(pos.File, pos.Pos, last.file, last.pos) && before(pos.OverlapFile, pos.OverlapPos, last.file, last.pos) {
		pos.OverlapFile, pos.OverlapPos = last.file, last.pos
		return true
	}
	return false
}

// ctxErr prefers the context's error: a cancelled Read closes its connection, and the query then fails.
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// chunk is a copied chunk of a table on its way to the engine.
type chunk struct {
	rec  arrow.RecordBatch // nil for an empty table
	rows int
	last []string // the key of its last row
	done bool     // the table's last chunk
}

// lane is a table being copied: readTable reads it over its own connection and hands its chunks on.
type lane struct {
	t      *Table
	conn   *mysql.Conn
	chunks chan chunk
	err    chan error // readTable's result, once chunks is closed
}

// copyTables copies todo, snapshot_parallel tables at a time, updating pos after each chunk.
//
// The tables in flight are a window: the first len(conns) unfinished tables in settings order, each read by
// its own goroutine over its own connection. This goroutine sends their chunks in turn, one per table per
// round, each followed by its checkpoint; a table leaves the window with its last chunk (whose checkpoint
// says it is done), and the next unfinished table enters on the freed connection. The order of chunks
// therefore depends only on the rows and on the position the copy started from: a resumed copy's window is
// again the first unfinished tables, and its first turn is the table after pos.Table, the table of the last
// chunk, exactly as the interrupted copy would have continued. So a replay reaches the same checkpoints.
// Memory in flight is about two chunks per table in the window.
//
// A full_row table's copy point, the coordinate of its connection's snapshot (at, by conns' index), is kept in
// its progress as it enters the window (fullrow.go).
func (r *reader) copyTables(ctx context.Context, conns []*mysql.Conn, at []coord, todo []*Table, pos *Position) error {
	if len(todo) == 0 {
		return nil
	}
	index := func(name string) int { return slices.Index(r.cfg.Tables, name) }
	free := slices.Clone(conns)
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // before the Wait: the readers stop at their next row or chunk
	var window []*lane
	open := func(t *Table) {
		l := &lane{t: t, conn: free[len(free)-1], chunks: make(chan chunk), err: make(chan error, 1)}
		free = free[:len(free)-1]
		from := pos.Progress[t.Name].Key
		if t.FullRow {
			c := at[slices.Index(conns, l.conn)]
			pos.Progress[t.Name] = TableProgress{From: &Coord{File: c.file, Pos: c.pos}}
			from = nil
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := r.readTable(ctx, l.conn, t, from, l.chunks)
			if err != nil {
				// Its result may be unread: the connection is no use for the snapshot's ROLLBACK or another table.
				l.conn.Close()
			}
			close(l.chunks)
			l.err <- err
		}()
		window = append(window, l)
		r.log.Info("copying table", "table", t.Name, "from_key", from)
	}
	for len(free) > 0 && len(todo) > 0 {
		open(todo[0])
		todo = todo[1:]
	}
	turn := 0
	if lastIdx := index(pos.Table); lastIdx >= 0 {
		for i, l := range window {
			if index(l.t.Name) > lastIdx {
				turn = i
				break
			}
		}
	}
	for len(window) > 0 {
		l := window[turn]
		var (
			c  chunk
			ok bool
		)
		select {
		case c, ok = <-l.chunks:
		case <-ctx.Done():
			return ctx.Err()
		}
		if !ok {
			if err := <-l.err; err != nil {
				return err
			}
			return fmt.Errorf("copy %s: the reader ended without the table's last chunk", l.t.Stream)
		}
		err := r.emitChunk(ctx, l.t, c, pos)
		if c.rec != nil {
			c.rec.Release()
		}
		if err != nil {
			return err
		}
		if !c.done {
			turn = (turn + 1) % len(window)
			continue
		}
		if err := <-l.err; err != nil {
			return err
		}
		r.log.Info("table copied", "table", l.t.Name, "rows", pos.Progress[l.t.Name].Rows)
		free = append(free, l.conn)
		window = slices.Delete(window, turn, turn+1)
		if len(todo) > 0 {
			open(todo[0])
			todo = todo[1:]
		}
		if turn >= len(window) {
			turn = 0
		}
	}
	return nil
}

// emitChunk sends a chunk of t and the checkpoint after it.
func (r *reader) emitChunk(ctx context.Context, t *Table, c chunk, pos *Position) error {
	if c.rec != nil {
		if err := r.out.Batch(ctx, t.Stream, c.rec); err != nil {
			return err
		}
	}
	prog := pos.Progress[t.Name]
	if c.rows > 0 {
		prog.Key = c.last
	}
	prog.Rows += int64(c.rows)
	prog.Done = c.done
	pos.Rows += int64(c.rows)
	pos.Progress[t.Name] = prog
	pos.Table = t.Name
	return r.out.Checkpoint(ctx, serve.Checkpoint{Position: pos.Encode(), RowsDone: pos.Rows})
}

// selectInKeyOrder is the query of t's rows in key order after the key from (from the first when nil), every
// column read the way the binary log carries it. The snapshot and the re-snapshot read tables with it.
func (r *reader) selectInKeyOrder(t *Table, from []string) (string, error) {
	cols := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		cols[i] = config.QuoteIdent(c.Name)
		if c.Kind == KindFloat32 {
			// FLOAT's text form is rounded to 6 digits; as a double it is exact, as in the binary log. The
			// alias keeps the result's column names the table's (resultSet checks them).
			cols[i] = "CAST(" + cols[i] + " AS DOUBLE) AS " + cols[i]
		}
	}
	keys := make([]string, len(t.Key))
	for i, k := range t.Key {
		keys[i] = config.QuoteIdent(t.Columns[k].Name)
	}
	q := "SELECT " + strings.Join(cols, ", ") + " FROM " + config.QuoteIdent(r.cfg.Database) + "." + config.QuoteIdent(t.Name)
	var conds []string
	if from != nil {
		cond, err := afterKey(t, from)
		if err != nil {
			return "", err
		}
		conds = append(conds, "("+cond+")")
	}
	if where := r.cfg.Where(t.Name); where != "" {
		// The row filter (rowfilter.go): the server evaluates it on the snapshot's rows.
		conds = append(conds, "("+where+")")
	}
	if len(conds) > 0 {
		q += " WHERE " + strings.Join(conds, " AND ")
	}
	if len(keys) == 0 {
		return q, nil // a full_row table: no key to order or resume by (fullrow.go)
	}
	return q + " ORDER BY " + strings.Join(keys, ", "), nil
}

// selectedNames are the names of t's columns: those of the result of selectInKeyOrder.
func selectedNames(t *Table) []string {
	names := make([]string, len(t.Columns))
	for i := range t.Columns {
		names[i] = t.Columns[i].Name
	}
	return names
}

// readTable reads t in key order after the key from (from the start when nil) and hands it on in chunks of
// batch_size rows, the last one marked done.
//
// It is one query read to its end, not one LIMIT query per chunk (each of those cost the server a plan and an
// index descent, and left it idle for a round trip); a resumed copy needs nothing more, since the checkpoint
// after each chunk holds its last key. Each chunk is known to be the table's last before it is sent (a row is
// read ahead), so the checkpoint that carries its rows already says the copy is done: the engine makes durable
// only checkpoints with rows, and a restart from one saying "not done" would need the table's columns as they
// were (DDL may follow). The rows come through a resultSet (one packet buffer for all of them). On an error the
// result may be unread: the caller closes conn.
func (r *reader) readTable(ctx context.Context, conn *mysql.Conn, t *Table, from []string, out chan<- chunk) error {
	q, err := r.selectInKeyOrder(t, from)
	if err != nil {
		return fault.ResnapshotErr(err, "start the pipeline from an empty checkpoint (a new snapshot)")
	}
	var rs resultSet
	if err := rs.start(conn, q, selectedNames(t)); err != nil {
		return fmt.Errorf("copy %s: %w", t.Stream, r.cfg.Explain(err))
	}
	send := func(c chunk) error {
		select {
		case out <- c:
			return nil
		case <-ctx.Done():
			if c.rec != nil {
				c.rec.Release()
			}
			return ctx.Err()
		}
	}
	var (
		rb   *rowBatch
		n    int
		last = newLastKey(t) // of the last row appended
	)
	defer func() {
		if rb != nil {
			rb.Release()
		}
	}()
	for {
		row, err := rs.next()
		if err != nil {
			return fmt.Errorf("copy %s: %w", t.Stream, r.cfg.Explain(err))
		}
		if row == nil || n == r.cfg.BatchSize {
			c := chunk{rows: n, done: row == nil}
			if n > 0 {
				c.rec = rb.NewRecordBatch()
				c.last = last.text(t)
			}
			if err := send(c); err != nil {
				return err
			}
			if row == nil {
				return nil
			}
			n = 0
			rb.Reserve(r.cfg.BatchSize)
		}
		if rb == nil {
			rb = r.newBatch(t)
			rb.Reserve(r.cfg.BatchSize)
		}
		if err := r.appendRow(rb, t, row, change.OpRead, ""); err != nil {
			return err
		}
		n++
		last.keep(t, row)
	}
}

// appendRow appends one row of text values (a snapshot query's cells, nil for NULL) to rb.
func (r *reader) appendRow(rb *rowBatch, t *Table, row [][]byte, op change.Op, where string) error {
	if err := rb.appendRow(row, op, where); err != nil {
		return valueErr(t, err)
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

// lastKey is the key of the last row read, copied out of it: the result set reuses a row's buffer for the next.
type lastKey [][]byte

func newLastKey(t *Table) lastKey { return make(lastKey, len(t.Key)) }

// keep copies row's key.
func (l lastKey) keep(t *Table, row [][]byte) {
	for i, k := range t.Key {
		l[i] = append(l[i][:0], row[k]...)
	}
}

// text is the key in checkpoint form (keyText).
func (l lastKey) text(t *Table) []string {
	out := make([]string, len(t.Key))
	for i, k := range t.Key {
		out[i] = keyText(&t.Columns[k], l[i])
	}
	return out
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
