package source

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"vitess.io/vitess/go/mysql"
	"vitess.io/vitess/go/mysql/binlog"
	"vitess.io/vitess/go/mysql/sqlerror"
	"vitess.io/vitess/go/sqltypes"
	querypb "vitess.io/vitess/go/vt/proto/query"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/dblog"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/plugins/mysql/config"
)

// Re-snapshot while streaming (`skippr resnapshot`, ReadRequest.Resnapshot): the watermark method of DBLog and
// Debezium's incremental snapshots, run by plugin-sdk/dblog as for the Postgres source, with the watermarks
// written through the binary log as rows of a table, since MySQL and MariaDB have nothing like
// pg_logical_emit_message. This file does what is MySQL's: the marks, the chunk's select, the heartbeat check.
//
// The table is `skippr_watermarks` in the database the setting watermark_database names (default: the source's
// database, so binlog filters and grants that cover the tables cover it too). The plugin creates it at the first
// re-snapshot when it is missing (watermarkDDL); a user without CREATE gets a configuration error naming the
// statement and the grant. One row per reader (its server_id), rewritten for every mark
// (INSERT … ON DUPLICATE KEY UPDATE), so the table never grows; the row's mark is a JSON watermark whose id
// carries a nonce of the Read. The binlog reader recognises the table's row events by database and name, takes
// the after image's mark, and never emits them as data.
//
// For the table at hand, one chunk at a time, always between two transactions of the binary log: the streamer
// writes a low watermark (its own autocommit transaction), selects the next batch_size rows after the last key
// copied (a consistent read that sees every transaction committed before it starts), and writes a high
// watermark; then it goes on reading the binary log. Every key of the table changed in the log from the point
// the chunk started at is remembered — that window opens before the low mark, which only drops more keys, and
// dropping a key is always safe: its change is in the log after the begin mark, and the log follows that change
// with every later one. When the high mark comes out of the log the chunk's rows whose key was remembered are
// dropped, the rest go out as snapshot reads, and the checkpoint at the end of the mark's transaction carries
// the last key copied.
//
// Why the select sees exactly what the log holds before the high mark: a transaction is written to the binary
// log before InnoDB makes it visible, and the server commits in binary-log order (binlog_order_commits, on by
// default), so once the low mark's commit returns, every transaction before it in the log is visible to the
// select; one that commits in the log between the two marks may or may not be visible, and its keys are in the
// window; one that the select sees committed before the select began, so before the high mark was written.
//
// A SIGKILL loses at most the chunk in flight: the next Read starts from the last checkpoint, whose progress
// names the last key copied, and writes new marks with a fresh nonce (old marks in the replayed log are
// ignored). The begin mark goes out before the first chunk, the end mark after the last one (a chunk shorter
// than batch_size), so a destination receives every row the table holds between the two and removes the others
// at the end. Progress is in every checkpoint (Position.Resnapshot) and in the gauges resnapshot_rows and
// resnapshot_rows_total; while a table is being copied the source never reports itself idle, so `sync --once`
// waits for the end mark. A column change of the table while a chunk is in flight discards that chunk (it was
// read with the old columns); the next one is read with the new ones.

// watermarkTable is the name of the watermark table in watermark_database.
const watermarkTable = "skippr_watermarks"

// watermarkDDL creates the watermark table in db.
func watermarkDDL(db string) string {
	return "CREATE TABLE IF NOT EXISTS " + config.QuoteIdent(db) + "." + config.QuoteIdent(watermarkTable) +
		" (reader VARCHAR(64) NOT NULL PRIMARY KEY, mark VARCHAR(1024) NOT NULL) ENGINE=InnoDB"
}

// ResnapshotProgress is how far the re-snapshot of one table has come; its key is in checkpoint form, as
// TableProgress.Key.
type ResnapshotProgress = dblog.Progress

// resnapper is the streamer's side of the re-snapshots of one Read: its dblog.Copier runs them and calls back
// here (dblog.Source) for what is MySQL's. Its methods run on the streamer's goroutine.
type resnapper struct {
	r    *reader
	st   *streamer
	c    *dblog.Copier
	conn *mysql.Conn // for the marks and the chunks' selects, opened at the first chunk
	stop func() bool
	rows resultSet // reads the chunks' selects, its buffer kept from chunk to chunk
	// readWith is the definition the chunk in flight was read with; beats counts the heartbeats since its
	// marks were written (the reader was at the log's end).
	readWith *Table
	beats    int
}

func newResnapper(st *streamer, progress map[string]ResnapshotProgress) *resnapper {
	s := &resnapper{r: st.reader, st: st}
	s.c = dblog.New(s, dblog.Config{ChunkRows: st.reader.cfg.BatchSize, Log: "binary log"}, progress)
	return s
}

// close releases the query connection and a chunk in flight.
func (s *resnapper) close() {
	if s == nil {
		return
	}
	s.c.Close()
	if s.conn != nil {
		s.stop()
		s.conn.Close()
	}
}

// active says a table is being copied again.
func (s *resnapper) active() bool { return s != nil && s.c.Active() }

// snapshot is the progress for a checkpoint.
func (s *resnapper) snapshot() map[string]ResnapshotProgress {
	if s == nil {
		return nil
	}
	return s.c.Progress()
}

// keysOf are the keys of a batch's rows, each as one string: the key columns' Arrow values (ValueStr) joined by
// NUL. A row of the binary log and the same row of a select become the same Arrow values (the two decoders meet
// in one conversion, TestSnapshotMatchesBinlog), so their keys are equal.
func keysOf(t *Table, rec arrow.RecordBatch) []string {
	out := make([]string, rec.NumRows())
	var b strings.Builder
	for i := range out {
		b.Reset()
		for j, k := range t.Key {
			if j > 0 {
				b.WriteByte(0)
			}
			b.WriteString(rec.Column(k).ValueStr(i))
		}
		out[i] = b.String()
	}
	return out
}

// saw remembers the keys of a change batch of the table whose chunk is in flight.
func (s *resnapper) saw(t *Table, rec arrow.RecordBatch) {
	if s == nil || !s.c.Watching(t.Stream) {
		return
	}
	for _, k := range keysOf(t, rec) {
		s.c.Saw(t.Stream, k)
	}
}

// step starts the next chunk when none is in flight. It runs between transactions only.
func (s *resnapper) step(ctx context.Context) error { return s.c.Step(ctx) }

// tableOf is the streamer's definition of stream (nil when the table is gone).
func (s *resnapper) tableOf(stream string) *Table {
	return s.st.tables[strings.TrimPrefix(stream, s.r.cfg.Database+".")]
}

// Prepare checks that the table is still there and has a key, and opens the query connection.
func (s *resnapper) Prepare(ctx context.Context, stream string) error {
	t := s.tableOf(stream)
	if t == nil {
		// Dropped or renamed away since: the truncate setting has dealt with its rows; nothing is left to copy.
		return dblog.ErrGone
	}
	if t.FullRow {
		return fault.ConfigErr(fmt.Errorf("re-snapshot of %s: the table is in mode: full_row, and the watermark copy, which reads in key order and relies on upserts by key, would duplicate rows of a keyless table", stream),
			"start the pipeline from an empty checkpoint (a new snapshot, which copies the table exactly), or give the table a primary key and remove its mode: full_row")
	}
	if len(t.Key) == 0 {
		return fault.ConfigErr(fmt.Errorf("re-snapshot of %s: the table has no primary key to copy it by", stream),
			fmt.Sprintf("ALTER TABLE %s ADD PRIMARY KEY (...)", stream))
	}
	return s.open(ctx)
}

// Begin sends the rows built so far, then the begin mark.
func (s *resnapper) Begin(ctx context.Context, stream string) (int64, error) {
	r := s.r
	if err := s.st.flush(ctx); err != nil {
		return 0, err
	}
	if err := r.out.Resnapshot(ctx, stream, false); err != nil {
		return 0, err
	}
	total := s.estimate(strings.TrimPrefix(stream, r.cfg.Database+"."))
	s.st.data = true
	r.log.Info("re-snapshot begins", "table", stream, "rows_estimate", total, "chunk_rows", r.cfg.BatchSize, "watermarks", r.cfg.WatermarkDatabase+"."+watermarkTable)
	return total, nil
}

// WriteMark writes a watermark row.
func (s *resnapper) WriteMark(ctx context.Context, _, mark string) error {
	return ctxErr(ctx, s.mark(mark))
}

// ReadChunk selects the chunk after key with the table's current definition.
func (s *resnapper) ReadChunk(ctx context.Context, stream string, key []string) (dblog.Chunk, error) {
	t := s.tableOf(stream)
	s.readWith, s.beats = t, 0 // its low mark was just written
	c, err := s.readChunk(t, key)
	if err != nil {
		return dblog.Chunk{}, ctxErr(ctx, err)
	}
	if s.r.chunkRead != nil {
		s.r.chunkRead(ctx, stream, c.Keys)
	}
	return c, nil
}

// Settle sends the rows built before the high mark; a chunk read before the table's columns changed (or it
// went) is read again (or the copy ends).
func (s *resnapper) Settle(ctx context.Context, stream string) (bool, error) {
	if err := s.st.flush(ctx); err != nil {
		return false, err
	}
	if t := s.st.tables[s.readWith.Name]; t != s.readWith {
		s.r.log.Info("re-snapshot: the table changed while a chunk was in flight; reading the chunk again", "table", stream)
		return false, nil
	}
	return true, nil
}

// Emit sends kept rows of a chunk as snapshot reads.
func (s *resnapper) Emit(ctx context.Context, stream string, rows arrow.RecordBatch) error {
	return s.r.out.Batch(ctx, stream, rows)
}

// Copied makes the next checkpoint carry the progress, and sends the end mark of a table whose copy is done
// (when its begin mark went out).
func (s *resnapper) Copied(ctx context.Context, stream string, prog ResnapshotProgress, _ int64, done bool) error {
	s.st.data = true
	if !done {
		return nil
	}
	if prog.Begun {
		if err := s.r.out.Resnapshot(ctx, stream, true); err != nil {
			return err
		}
	}
	s.r.log.Info("re-snapshot done", "table", stream, "rows", prog.Rows)
	return nil
}

// stalledBeats is how many heartbeats may pass after a chunk's marks were written without them coming out of the
// binary log. A heartbeat says the server has sent everything it logged; the first may have been on its way
// before the marks were written, but not five (one a second).
const stalledBeats = 5

// heartbeat handles a heartbeat while a table is being copied: the marks of the chunk in flight must have come
// out by now, unless the server does not log the watermark table (binlog_ignore_db, binlog_do_db); else the
// next chunk starts.
func (s *resnapper) heartbeat(ctx context.Context) error {
	if stream, low, ok := s.c.InFlight(); ok {
		if s.beats++; s.beats >= stalledBeats {
			db := s.r.cfg.WatermarkDatabase
			return fault.ConfigErr(fmt.Errorf("re-snapshot of %s: its watermarks, written to %s.%s, never came out of the binary log (the low one did: %v): the server does not log that database", stream, db, watermarkTable, low),
				fmt.Sprintf("set watermark_database to a database the binary log records (binlog_do_db/binlog_ignore_db, or a replication filter, leave out %s)", db))
		}
		return nil
	}
	return s.step(ctx)
}

// open connects the query connection and makes sure the watermark table exists.
func (s *resnapper) open(ctx context.Context) error {
	if s.conn != nil {
		return nil
	}
	r := s.r
	conn, err := r.cfg.Connect(ctx)
	if err != nil {
		return err
	}
	s.conn = conn
	s.stop = context.AfterFunc(ctx, func() { conn.Close() })
	res, err := conn.ExecuteFetch("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = "+sqltypes.EncodeStringSQL(r.cfg.WatermarkDatabase)+
		" AND TABLE_NAME = "+sqltypes.EncodeStringSQL(watermarkTable), 1, false)
	if err != nil {
		return ctxErr(ctx, fmt.Errorf("look for the watermark table: %w", r.cfg.Explain(err)))
	}
	if len(res.Rows) == 1 && res.Rows[0][0].ToString() != "0" {
		return nil
	}
	if _, err := conn.ExecuteFetch(watermarkDDL(r.cfg.WatermarkDatabase), 0, false); err != nil {
		return ctxErr(ctx, s.grantErr("create the watermark table", err))
	}
	r.log.Info("watermark table created", "table", r.cfg.WatermarkDatabase+"."+watermarkTable)
	return nil
}

// grantErr explains a failed statement on the watermark table: the fix is the table and the grant.
func (s *resnapper) grantErr(what string, err error) error {
	cfg := s.r.cfg
	fix := fmt.Sprintf("%s; GRANT INSERT, UPDATE ON %s.%s TO '%s' (the re-snapshot's watermarks; or set watermark_database to a database the user may write to)",
		watermarkDDL(cfg.WatermarkDatabase), config.QuoteIdent(cfg.WatermarkDatabase), config.QuoteIdent(watermarkTable), cfg.User)
	var se *sqlerror.SQLError
	if errors.As(err, &se) {
		switch se.Number() {
		case sqlerror.ERTableAccessDenied, sqlerror.ERDBAccessDenied, sqlerror.ERAccessDeniedError, sqlerror.ERSpecifiedAccessDenied, sqlerror.ERBadDb, sqlerror.ERNoSuchTable:
			return fault.ConfigErr(fmt.Errorf("re-snapshot: %s %s.%s: %w", what, cfg.WatermarkDatabase, watermarkTable, err), fix)
		}
	}
	return fmt.Errorf("re-snapshot: %s %s.%s: %w", what, cfg.WatermarkDatabase, watermarkTable, cfg.Explain(err))
}

// mark writes a watermark: this reader's row of the watermark table, in a transaction of its own.
func (s *resnapper) mark(mark string) error {
	m := sqltypes.EncodeStringSQL(mark)
	q := "INSERT INTO " + config.QuoteIdent(s.r.cfg.WatermarkDatabase) + "." + config.QuoteIdent(watermarkTable) + " (reader, mark) VALUES (" +
		sqltypes.EncodeStringSQL(strconv.FormatUint(uint64(s.r.cfg.ServerID), 10)) + ", " + m + ") ON DUPLICATE KEY UPDATE mark = " + m
	if _, err := s.conn.ExecuteFetch(q, 0, false); err != nil {
		return s.grantErr("write a watermark to", err)
	}
	return nil
}

// estimate is the server's row estimate of a table (0 when unknown).
func (s *resnapper) estimate(name string) int64 {
	res, err := s.conn.ExecuteFetch("SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = "+sqltypes.EncodeStringSQL(s.r.cfg.Database)+
		" AND TABLE_NAME = "+sqltypes.EncodeStringSQL(name), 1, false)
	if err != nil || len(res.Rows) != 1 {
		return 0
	}
	n, _ := strconv.ParseInt(res.Rows[0][0].ToString(), 10, 64)
	return n
}

// readChunk selects the next batch_size rows of t after key (from the first when nil), in key order.
func (s *resnapper) readChunk(t *Table, key []string) (dblog.Chunk, error) {
	r := s.r
	q, err := r.selectInKeyOrder(t, key)
	if err != nil {
		return dblog.Chunk{}, fault.ResnapshotErr(fmt.Errorf("re-snapshot of %s: %w", t.Stream, err), "start the pipeline from an empty checkpoint (a new snapshot)")
	}
	if err := s.rows.start(s.conn, q+" LIMIT "+strconv.Itoa(r.cfg.BatchSize), selectedNames(t)); err != nil {
		return dblog.Chunk{}, fmt.Errorf("re-snapshot of %s: %w", t.Stream, r.cfg.Explain(err))
	}
	rb := r.newBatch(t)
	defer rb.Release()
	var (
		c    dblog.Chunk
		last = newLastKey(t)
	)
	for {
		row, err := s.rows.next()
		if err != nil {
			return dblog.Chunk{}, fmt.Errorf("re-snapshot of %s: %w", t.Stream, r.cfg.Explain(err))
		}
		if row == nil {
			break
		}
		if err := r.appendRow(rb, t, row, change.OpRead, ""); err != nil {
			// Read the rest (at most a chunk): the connection stays usable, as after any failed statement.
			s.rows.drain()
			return dblog.Chunk{}, err
		}
		c.Rows++
		last.keep(t, row)
	}
	if c.Rows > 0 {
		c.Rec = rb.NewRecordBatch()
		c.Keys = keysOf(t, c.Rec)
		c.Last = last.text(t)
	}
	return c, nil
}

// isMarkTable says a table map is the watermark table's.
func (s *resnapper) isMarkTable(tm *mysql.TableMap) bool {
	return s != nil && tm.Database == s.r.cfg.WatermarkDatabase && tm.Name == watermarkTable
}

// marks handles a rows event of the watermark table: never data; the in-flight chunk's marks move it on.
func (s *resnapper) marks(ctx context.Context, ev mysql.BinlogEvent, tm *mysql.TableMap) error {
	if _, _, ok := s.c.InFlight(); !ok || !(ev.IsWriteRows() || ev.IsUpdateRows()) {
		return nil
	}
	st := s.st
	rows, err := ev.Rows(st.format, tm)
	if err != nil {
		return fmt.Errorf("binlog rows of the watermark table at %s:%d: %w", st.file, ev.NextPosition(), err)
	}
	for i := range rows.Rows {
		row := &rows.Rows[i]
		m, err := markOf(tm, &rows.DataColumns, &row.NullColumns, row.Data)
		if err != nil {
			return fault.ConfigErr(fmt.Errorf("the watermark table %s.%s at %s:%d: %w", tm.Database, tm.Name, st.file, ev.NextPosition(), err),
				fmt.Sprintf("DROP TABLE %s.%s (the next re-snapshot creates it as %s)", config.QuoteIdent(tm.Database), config.QuoteIdent(tm.Name), watermarkDDL(tm.Database)))
		}
		if err := s.c.Mark(ctx, []byte(m)); err != nil {
			return err
		}
	}
	return nil
}

// markOf reads the mark column of a watermark row's after image; the table must be as watermarkDDL makes it.
func markOf(tm *mysql.TableMap, cols, nulls *mysql.Bitmap, data []byte) (string, error) {
	if len(tm.Types) != 2 || tm.Types[0] != binlog.TypeVarchar || tm.Types[1] != binlog.TypeVarchar || !cols.Bit(0) || !cols.Bit(1) {
		return "", errors.New("its rows are not (reader VARCHAR, mark VARCHAR) with full images")
	}
	pos := 0
	var v sqltypes.Value
	for c := range 2 {
		if nulls.Bit(c) {
			return "", errors.New("a watermark row with a NULL column")
		}
		var l int
		var err error
		v, l, err = binlog.CellValue(data, pos, tm.Types[c], tm.Metadata[c], &querypb.Field{Type: querypb.Type_VARCHAR}, false)
		if err != nil {
			return "", err
		}
		pos += l
	}
	return v.ToString(), nil
}

// metrics are each table's re-snapshot progress.
func (s *resnapper) metrics() []serve.Metric {
	if !s.active() {
		return nil
	}
	var out []serve.Metric
	progress := s.c.Progress()
	for _, name := range slices.Sorted(maps.Keys(progress)) {
		p := progress[name]
		labels := map[string]string{"table": name}
		out = append(out,
			serve.Metric{Name: "resnapshot_rows", Value: float64(p.Rows), Labels: labels, Help: "Rows of the table the re-snapshot in progress has copied."},
			serve.Metric{Name: "resnapshot_rows_total", Value: float64(max(p.Total, p.Rows)), Labels: labels, Help: "Rows the re-snapshot in progress expects to copy from the table (the server's estimate when it began)."})
	}
	return out
}

// addResnapshots takes the streams of a Read's request into the position; one already in progress stays where
// it is.
func (r *reader) addResnapshots(pos *Position, requested []string) error {
	var offered []string
	for _, name := range r.cfg.Tables {
		offered = append(offered, r.cfg.Stream(name))
	}
	for _, stream := range requested {
		if !slices.Contains(offered, stream) {
			return fault.ConfigErr(fmt.Errorf("re-snapshot of %s: not among the configured tables (%s)", stream, strings.Join(offered, ", ")),
				"add the table to the source's tables, or remove the request file under the pipeline's state directory")
		}
		if pos.Resnapshot == nil {
			pos.Resnapshot = map[string]ResnapshotProgress{}
		}
		if _, ok := pos.Resnapshot[stream]; !ok {
			pos.Resnapshot[stream] = ResnapshotProgress{}
		}
	}
	return nil
}

// addedTables takes the tables the settings list beyond a stream checkpoint's into the position, each to be
// copied while streaming: the binary log from the checkpoint on carries their changes, and the re-snapshot
// their rows. Tables the settings no longer list are dropped from it. It reports whether the set changed.
func (r *reader) addedTables(pos *Position) bool {
	var added, removed []string
	for _, name := range pos.Tables {
		if !slices.Contains(r.cfg.Tables, name) {
			removed = append(removed, name)
		}
	}
	for _, name := range r.cfg.Tables {
		if !slices.Contains(pos.Tables, name) {
			added = append(added, name)
		}
	}
	if len(added) == 0 && len(removed) == 0 {
		return false
	}
	pos.Tables = slices.Clone(r.cfg.Tables)
	// A table removed is no longer read (its definition leaves the checkpoint with startDefs); its
	// destination table keeps the rows it has. This is one way out of a RENAME TABLE to an uncaptured name.
	for _, name := range removed {
		delete(pos.Resnapshot, r.cfg.Stream(name))
	}
	if len(removed) > 0 {
		r.log.Info("tables removed from the pipeline: no longer read; their destination tables keep their rows", "tables", strings.Join(removed, ", "))
	}
	if len(added) == 0 {
		return true
	}
	var streams []string
	for _, name := range added {
		streams = append(streams, r.cfg.Stream(name))
	}
	_ = r.addResnapshots(pos, streams) // every one is configured
	r.log.Info("tables added to the pipeline: copying them while streaming", "tables", strings.Join(streams, ", "))
	return true
}

// CanResnapshot: the source copies tables again by the watermark method (resnapshot.go), so Serve announces
// the source.resnapshot service.
func (s *Source) CanResnapshot() bool { return true }

var _ serve.Resnapshotter = (*Source)(nil)
