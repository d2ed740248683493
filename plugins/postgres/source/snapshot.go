package source

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/plugin-sdk/values"
	"github.com/skippr-dev/skippr/plugins/postgres/typemap"
)

// snapshot copies the tables in key order, batch_size rows at a time, with a checkpoint after each chunk,
// and returns the stream position that follows it.
//
// tx is the transaction holding the slot's exported snapshot, or nil when resuming: an exported snapshot
// does not outlive the session that created the slot, so a resumed copy continues from the last key under a
// fresh REPEATABLE READ snapshot. That is still correct: the slot stays at its consistent point until the
// snapshot is done, so streaming replays every change made after it, and replaying a change over a newer
// row converges to the same final row (upserts and deletes by key, in commit order).
func (r *reader) snapshot(ctx context.Context, tx pgx.Tx, pos *Position) (*Position, error) {
	if tx == nil {
		var confirmed *string
		if err := r.pool.QueryRow(ctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, r.cfg.Slot).Scan(&confirmed); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return nil, fault.ResnapshotErr(fmt.Errorf("replication slot %s does not exist (dropped?) while the snapshot was being resumed", r.cfg.Slot),
					"re-snapshot: run `skippr teardown PIPELINE`, then sync the pipeline under a new name and wal.url so its tables are copied again")
			}
			return nil, fmt.Errorf("replication slot %s: %w", r.cfg.Slot, r.cfg.Explain(err))
		}
		if c, err := parseLSN(confirmed); err != nil || c > pos.LSNValue() {
			return nil, fault.ResnapshotErr(fmt.Errorf("replication slot %s is at %v, past the snapshot's start %s, so changes made during the snapshot are gone", r.cfg.Slot, deref(confirmed), pos.LSN),
				"re-snapshot: run `skippr teardown PIPELINE`, then sync the pipeline under a new name and wal.url so its tables are copied again")
		}
		var err error
		if r.appendUnfinished(pos) {
			// A table in mode: append has no key that would let the stream's replay of rows the copy already
			// holds converge: it is copied again whole, exactly (recopyAppend).
			if tx, err = r.recopyAppend(ctx, pos); err != nil {
				return nil, err
			}
		} else {
			if tx, err = r.beginSnapshot(ctx, ""); err != nil {
				return nil, err
			}
			// The first statement takes the snapshot; the LSN read after it bounds every transaction it sees.
			var cur string
			if err := tx.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&cur); err != nil {
				tx.Rollback(context.Background())
				return nil, fmt.Errorf("resume snapshot: %w", r.cfg.Explain(err))
			}
			// Nothing written since the slot's start (cur at L): the copy holds nothing streaming will replay, and the
			// checkpoints stay those of the first copy, byte for byte.
			if l, err := pglogrepl.ParseLSN(cur); err == nil && l > pos.LSNValue() && l > pos.OverlapValue() {
				pos.Overlap = l.String()
			}
		}
		r.log.Info("resuming the snapshot under a new snapshot", "rows_done", pos.Rows)
	}
	defer tx.Rollback(context.Background())

	var total int64
	for _, name := range pos.Tables {
		total += r.tables[name].Estimate
	}
	next := *pos
	next.Progress = maps.Clone(pos.Progress)
	if next.Progress == nil {
		next.Progress = map[string]TableProgress{}
	}
	if err := r.copyTables(ctx, tx, &next, total); err != nil {
		return nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, r.cfg.Explain(err)
	}
	done := next.streamPhase()
	if err := r.out.Checkpoint(ctx, serve.Checkpoint{Position: done.Encode(), RowsDone: next.Rows, RowsTotal: next.Rows, Metrics: r.snapshotMetrics(&next)}); err != nil {
		return nil, err
	}
	r.emitted = false
	r.log.Info("snapshot done", "rows", next.Rows)
	return &done, nil
}

// chunk is a copied chunk on its way to the engine.
type chunk struct {
	rec  arrow.RecordBatch
	rows int
	last []string // the chunk's last key
	keys []string // each row's key (keyText), for a limited query only (a re-snapshot's chunk)
	// final: the table's last chunk. Its checkpoint marks the table done, so a Read that starts from it
	// copies nothing more of the table: a resumed copy reads under a fresh snapshot, and for a table without
	// a key (mode: append) any row it read again would be a second copy.
	final bool
}

// progressEvery is how often the snapshot logs each table's rows beside its estimate.
const progressEvery = 15 * time.Second

// lane is a table being copied: queryChunks reads it over its own transaction and hands its chunks on.
type lane struct {
	t      *table
	tx     pgx.Tx
	chunks chan chunk
	err    chan error // queryChunks' result, once chunks is closed
}

// copyTables copies the tables not done yet, snapshot_parallel at a time, updating next after each chunk.
//
// The tables in flight are a window: the first snapshot_parallel unfinished tables in the order of Tables,
// each read by its own goroutine over its own transaction, which imported tx's snapshot. This goroutine
// sends their chunks in turn, one per table per round, each followed by its checkpoint, so the server,
// the decoding and the sending overlap (done one after the other, each sat idle most of the time;
// BENCHMARKS.md). A table leaves the window when its turn finds it finished, and the next unfinished table
// enters. The order of chunks therefore depends only on the rows and on the position the copy started
// from: a replay from a checkpoint reaches the same checkpoints, and a resumed round continues after
// next.Table, the table of the last chunk, exactly as the interrupted one would have. Memory in flight is
// about one chunk per table in the window.
func (r *reader) copyTables(ctx context.Context, tx pgx.Tx, next *Position, total int64) error {
	var todo []*table
	for _, name := range next.Tables {
		if !next.Progress[name].Done {
			todo = append(todo, r.tables[name])
		}
	}
	n := min(r.cfg.SnapshotParallel, len(todo))
	if n == 0 {
		return nil
	}
	txs := []pgx.Tx{tx} // the caller ends tx; the others end here
	defer func() {
		for _, t := range txs[1:] {
			t.Rollback(context.Background())
		}
	}()
	if n > 1 {
		// tx's snapshot, exported again: it can be imported while tx is open, by transactions that then
		// see exactly what tx sees (the slot's exported snapshot, or a resumed copy's fresh one).
		var id string
		if err := tx.QueryRow(ctx, `SELECT pg_export_snapshot()`).Scan(&id); err != nil {
			return fmt.Errorf("export the snapshot to the parallel readers: %w", r.cfg.Explain(err))
		}
		for len(txs) < n {
			t, err := r.beginSnapshot(ctx, id)
			if err != nil {
				return err
			}
			txs = append(txs, t)
		}
	}
	free := slices.Clone(txs) // the transactions no lane is using
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // before the Wait: the lanes stop at their next row or chunk
	var window []*lane
	open := func(t *table) {
		l := &lane{t: t, tx: free[len(free)-1], chunks: make(chan chunk), err: make(chan error, 1)}
		free = free[:len(free)-1]
		from := next.Progress[t.Name.String()].Key
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := r.queryChunks(ctx, l.tx, t, from, l.chunks, 0)
			close(l.chunks)
			l.err <- err
		}()
		window = append(window, l)
		r.log.Info("copying table", "table", t.Name.String(), "rows_estimate", t.Estimate, "from_key", from)
	}
	for _, t := range todo[:n] {
		open(t)
	}
	todo = todo[n:]
	// turnAfter is the lane whose table comes first after table in the order of tables (the first lane when
	// none does): where a round continues after a chunk of table, in a Read that resumes from its checkpoint
	// and in one that has just finished table alike, so both reach the same checkpoints.
	turnAfter := func(table string) int {
		if last := slices.Index(next.Tables, table); last >= 0 {
			for i, l := range window {
				if slices.Index(next.Tables, l.t.Name.String()) > last {
					return i
				}
			}
		}
		return 0
	}
	turn := turnAfter(next.Table)
	// finish closes the lane at turn, whose table is copied, and opens the next table.
	finish := func() {
		l := window[turn]
		name := l.t.Name.String()
		next.Progress[name] = TableProgress{Done: true, Rows: next.Progress[name].Rows}
		r.log.Info("table copied", "table", name, "rows", next.Progress[name].Rows)
		free = append(free, l.tx)
		window = slices.Delete(window, turn, turn+1)
		if len(todo) > 0 {
			open(todo[0])
			todo = todo[1:]
		}
	}
	lastReport := time.Now()
	for len(window) > 0 {
		if time.Since(lastReport) >= progressEvery {
			// Checkpoints carry the copy's total; the per-table view is the log's.
			for _, l := range window {
				r.log.Info("snapshot progress", "table", l.t.Name.String(), "rows", next.Progress[l.t.Name.String()].Rows, "rows_estimate", l.t.Estimate)
			}
			lastReport = time.Now()
		}
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
		if ok {
			err := r.emitChunk(ctx, l.t, c, next, total)
			c.rec.Release()
			if err != nil {
				return err
			}
			if !c.final {
				turn = (turn + 1) % len(window)
				continue
			}
			// The table's last chunk, whose checkpoint marked it done: its query has ended.
			for range l.chunks {
			}
			if err := <-l.err; err != nil {
				return err
			}
			finish()
			turn = turnAfter(l.t.Name.String())
			continue
		}
		// The query ended without a final chunk: the table had no rows (left).
		if err := <-l.err; err != nil {
			return err
		}
		finish()
		if turn >= len(window) {
			turn = 0
		}
	}
	return nil
}

// emitChunk sends a chunk of t and the checkpoint after it.
func (r *reader) emitChunk(ctx context.Context, t *table, c chunk, next *Position, total int64) error {
	name := t.Name.String()
	if err := r.emitBatch(ctx, name, t.Key, c.rec); err != nil {
		return err
	}
	next.Rows += int64(c.rows)
	next.Table = name
	next.Progress[name] = TableProgress{Key: c.last, Rows: next.Progress[name].Rows + int64(c.rows)}
	if c.final {
		next.Progress[name] = TableProgress{Done: true, Rows: next.Progress[name].Rows}
	}
	if err := r.out.Checkpoint(ctx, serve.Checkpoint{Position: next.Encode(), RowsDone: next.Rows, RowsTotal: max(total, next.Rows), Metrics: r.snapshotMetrics(next)}); err != nil {
		return err
	}
	r.emitted = false
	return nil
}

// queryChunks reads the table in key order after startKey and hands it on in chunks of batch_size rows.
//
// It is one query read to its end, not one LIMIT query per chunk: per chunk those cost the server a plan and
// an index descent and left it idle for a round trip, and the snapshot reached 46–64% of binary COPY against
// about 80% now (BENCHMARKS.md). Resuming needs nothing more, since the checkpoint after each chunk holds its last
// key. beginSnapshot keeps the planner on the key index and lifts statement_timeout for it.
//
// With limit > 0 it reads at most limit rows (one chunk of a re-snapshot, resnapshot.go) and records each row's key.
func (r *reader) queryChunks(ctx context.Context, tx pgx.Tx, t *table, startKey []string, chunks chan<- chunk, limit int) error {
	cols := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		cols[i] = pgx.Identifier{c.Name}.Sanitize()
	}
	keys := make([]string, len(t.Key))
	keyIdx := make([]int, len(t.Key))
	params := make([]string, len(t.Key))
	for i, k := range t.Key {
		keys[i] = pgx.Identifier{k}.Sanitize()
		keyIdx[i] = slices.IndexFunc(t.Columns, func(c column) bool { return c.Name == k })
		params[i] = fmt.Sprintf("$%d", i+1)
	}
	colKeyIdx := keyIdx // the key among the table's columns
	if len(t.Key) == 0 {
		// A table without a key (mode: append) is copied in the order of its rows' physical places, which a
		// resumed copy continues from. The ctid is read after the columns and is no column of the stream.
		keys, keyIdx, params = []string{"ctid"}, []int{len(t.Columns)}, []string{"$1"}
		cols = append(cols, "ctid")
	}
	from := t.Name.Quoted()
	if t.Kind == "r" {
		from = "ONLY " + from // publications publish inheritance children as tables of their own
	}
	// The row filter is the publication's too (rowfilter.go): the copy holds exactly the rows whose changes
	// the stream carries.
	where, and := "", ""
	if t.Filter != "" {
		where, and = " WHERE ("+t.Filter+")", " AND ("+t.Filter+")"
	}
	first := fmt.Sprintf("SELECT %s FROM %s%s ORDER BY %s", strings.Join(cols, ", "), from, where, strings.Join(keys, ", "))
	after := fmt.Sprintf("SELECT %s FROM %s WHERE (%s) > (%s)%s ORDER BY %s", strings.Join(cols, ", "), from,
		strings.Join(keys, ", "), strings.Join(params, ", "), and, strings.Join(keys, ", "))
	batch := r.cfg.BatchSize
	var rowKeys []string
	if limit > 0 {
		first += fmt.Sprintf(" LIMIT %d", limit)
		after += fmt.Sprintf(" LIMIT %d", limit)
		batch = limit
		rowKeys = make([]string, 0, limit)
	}
	sc := schema(t.Columns, t.Key, r.cfg.Policy, t.FullRow)
	b := change.NewBuilder(r.mem, sc)
	defer b.Release()
	// Key columns come back as text: the checkpoint records the last key in text, the form a resumed copy
	// passes back as parameters. The other columns come in binary where typemap can, which costs the server
	// and the plugin a fraction of text (BENCHMARKS.md).
	formats := make([]int16, len(cols))
	decode := make([]func([]byte) error, len(t.Columns))
	for i, c := range t.Columns {
		bin := typemap.Binary(c.Type) && !slices.Contains(keyIdx, i)
		if bin {
			formats[i] = 1
		}
		decode[i] = typemap.Decoder(c.Type, b.Field(i), bin)
	}
	pgc := tx.Conn().PgConn()
	stream := t.Name.String()
	sql, args := first, [][]byte(nil)
	if startKey != nil {
		sql = after
		for _, k := range startKey {
			args = append(args, []byte(k))
		}
	}
	lastBuf := make([][]byte, len(keyIdx))
	b.Reserve(r.cfg.BatchSize)
	// flush hands the rows built so far on as one chunk, ending at the key in lastBuf. A full chunk waits for
	// the next row (full), so the last chunk of the table is known to be the last.
	full := false
	flush := func(n int, final bool) error {
		last := make([]string, len(keyIdx))
		for i, v := range lastBuf {
			last[i] = string(v)
		}
		rec := b.NewBatch()
		b.Reserve(r.cfg.BatchSize)
		reserveData(b, rec)
		select {
		case chunks <- chunk{rec: rec, rows: n, last: last, keys: rowKeys, final: final}:
			return nil
		case <-ctx.Done():
			rec.Release()
			return ctx.Err()
		}
	}
	var row values.Row
	rr := pgc.ExecParams(ctx, sql, args, nil, nil, formats)
	n := 0
	for rr.NextRow() {
		if full {
			if err := flush(n, false); err != nil {
				rr.Close()
				return err
			}
			n, full = 0, false
		}
		vals := rr.Values()
		row.Reset()
		for i, v := range vals[:len(t.Columns)] {
			if v == nil {
				b.Field(i).AppendNull()
				continue
			}
			if err := decode[i](v); err != nil {
				if err := r.unrepresentable(stream, t.Columns, colKeyIdx, vals, i, b.Field(i), err, &row); err != nil {
					rr.Close()
					return fmt.Errorf("snapshot of %s, column %s: %w", stream, t.Columns[i].Name, err)
				}
			}
		}
		appendMeta(b, len(t.Columns), r.cfg.Policy, &row)
		b.Row(change.OpRead, "")
		n++
		for i, j := range keyIdx {
			lastBuf[i] = append(lastBuf[i][:0], vals[j]...)
		}
		if limit > 0 {
			rowKeys = append(rowKeys, keyText(lastBuf))
		}
		full = n == batch
	}
	if _, err := rr.Close(); err != nil {
		return fmt.Errorf("snapshot of %s: %w", stream, r.cfg.Explain(err))
	}
	if n == 0 {
		return nil
	}
	return flush(n, true)
}

// unrepresentable applies on_unrepresentable to decoder error err of column i of a row whose text or binary
// values are vals: nil when the value stands as NULL (appended to b) and is recorded in row.
func (r *reader) unrepresentable(stream string, cols []column, keyIdx []int, vals [][]byte, i int, b array.Builder, err error, row *values.Row) error {
	w := values.Where{Table: stream, Column: cols[i].Name, IsKey: slices.Contains(keyIdx, i), Key: func() string {
		names, keys := make([]string, len(keyIdx)), make([]string, len(keyIdx))
		for k, j := range keyIdx {
			names[k], keys[k] = cols[j].Name, string(vals[j]) // key columns are always read in text
		}
		return values.KeyText(names, keys)
	}}
	if err := r.values.Handle(w, err, row); err != nil {
		return err
	}
	var u *values.Unrepresentable
	if errors.As(err, &u) && !u.Appended {
		b.AppendNull()
	}
	return nil
}

// appendMeta fills the _skippr_meta column (index at) of the row just decoded, when the policy has one.
func appendMeta(b *change.Builder, at int, policy values.Policy, row *values.Row) {
	if policy != values.NullAndRecord {
		return
	}
	mb := b.Field(at).(*array.StringBuilder)
	if row.Changed() {
		mb.Append(row.JSON())
	} else {
		mb.AppendNull()
	}
}

// reserveData sizes the variable-length columns' data buffers for a chunk like rec, the one before.
func reserveData(b *change.Builder, rec arrow.RecordBatch) {
	for i, col := range rec.Columns()[:rec.NumCols()-2] { // the last two are the op and position columns
		a, ok := col.(interface{ ValueBytes() []byte })
		if !ok {
			continue
		}
		if sb, ok := b.Field(i).(interface{ ReserveData(int) }); ok {
			sb.ReserveData(len(a.ValueBytes()))
		}
	}
}
