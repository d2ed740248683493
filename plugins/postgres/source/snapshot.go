package source

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
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
			return nil, fmt.Errorf("replication slot %s: %w (was it dropped? the pipeline must start again from an empty checkpoint)", r.cfg.Slot, r.cfg.Explain(err))
		}
		if c, err := parseLSN(confirmed); err != nil || c > pos.LSNValue() {
			return nil, fmt.Errorf("replication slot %s is at %v, past the snapshot's start %s, so changes made during the snapshot are gone: drop the slot and start the pipeline again", r.cfg.Slot, deref(confirmed), pos.LSN)
		}
		var err error
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
		r.log.Info("resuming the snapshot under a new snapshot", "table", pos.Table, "rows_done", pos.Rows)
	}
	defer tx.Rollback(context.Background())

	var total int64
	for _, name := range pos.Tables {
		total += r.tables[name].Estimate
	}
	next := *pos
	start := slices.Index(next.Tables, next.Table)
	for i := start; i < len(next.Tables); i++ {
		t := r.tables[next.Tables[i]]
		if i > start {
			next.Table, next.Key = t.Name.String(), nil
		}
		if err := r.copyTable(ctx, tx, t, &next, total); err != nil {
			return nil, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, r.cfg.Explain(err)
	}
	done := Position{V: positionVersion, Phase: PhaseStream, Slot: next.Slot, LSN: next.LSN, Tables: next.Tables, Overlap: next.Overlap}
	if err := r.out.Checkpoint(ctx, serve.Checkpoint{Position: done.Encode(), RowsDone: next.Rows, RowsTotal: next.Rows}); err != nil {
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
}

// copyTable copies one table from next.Key on, updating next after each chunk.
//
// A chunk is sent (Arrow IPC, the engine's flow control, its checkpoint) while the next one is read and
// decoded: done one after the other, the server, the plugin and the engine each sat idle most of the time
// (BENCHMARKS.md). Chunks and their checkpoints still go out in key order, one behind at most.
func (r *reader) copyTable(ctx context.Context, tx pgx.Tx, t *table, next *Position, total int64) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	chunks := make(chan chunk)
	sent := make(chan error, 1)
	stream := t.Name.String()
	go func() {
		var err error
		for c := range chunks {
			if err == nil {
				err = r.emitChunk(ctx, stream, t.Key, c, next, total)
				if err != nil {
					cancel() // the query loop stops at its next row
				}
			}
			c.rec.Release()
		}
		sent <- err
	}()
	err := r.queryChunks(ctx, tx, t, next.Key, chunks)
	close(chunks)
	if sendErr := <-sent; sendErr != nil {
		return sendErr
	}
	return err
}

// emitChunk sends a chunk and the checkpoint after it.
func (r *reader) emitChunk(ctx context.Context, stream string, key []string, c chunk, next *Position, total int64) error {
	if err := r.emitBatch(ctx, stream, key, c.rec); err != nil {
		return err
	}
	next.Rows += int64(c.rows)
	next.Key = c.last
	if err := r.out.Checkpoint(ctx, serve.Checkpoint{Position: next.Encode(), RowsDone: next.Rows, RowsTotal: max(total, next.Rows)}); err != nil {
		return err
	}
	r.emitted = false
	return nil
}

// queryChunks reads the table in key order after startKey and hands it on in chunks of batch_size rows.
//
// It is one query read to its end, not one LIMIT query per chunk: per chunk those cost the server a plan and
// an index descent and left it idle for a round trip, and the snapshot reached 46–65% of binary COPY against
// 79% now (BENCHMARKS.md). Resuming needs nothing more, since the checkpoint after each chunk holds its last
// key. beginSnapshot keeps the planner on the key index and lifts statement_timeout for it.
func (r *reader) queryChunks(ctx context.Context, tx pgx.Tx, t *table, startKey []string, chunks chan<- chunk) error {
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
	from := t.Name.Quoted()
	if t.Kind == "r" {
		from = "ONLY " + from // publications publish inheritance children as tables of their own
	}
	first := fmt.Sprintf("SELECT %s FROM %s ORDER BY %s", strings.Join(cols, ", "), from, strings.Join(keys, ", "))
	after := fmt.Sprintf("SELECT %s FROM %s WHERE (%s) > (%s) ORDER BY %s", strings.Join(cols, ", "), from,
		strings.Join(keys, ", "), strings.Join(params, ", "), strings.Join(keys, ", "))
	sc := schema(t.Columns, t.Key)
	b := change.NewBuilder(r.mem, sc)
	defer b.Release()
	// Key columns come back as text: the checkpoint records the last key in text, the form a resumed copy
	// passes back as parameters. The other columns come in binary where typemap can, which costs the server
	// and the plugin a fraction of text (BENCHMARKS.md).
	formats := make([]int16, len(t.Columns))
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
	// flush hands the rows built so far on as one chunk, ending at the key in lastBuf.
	flush := func(n int) error {
		last := make([]string, len(keyIdx))
		for i, v := range lastBuf {
			last[i] = string(v)
		}
		rec := b.NewBatch()
		b.Reserve(r.cfg.BatchSize)
		reserveData(b, rec)
		select {
		case chunks <- chunk{rec: rec, rows: n, last: last}:
			return nil
		case <-ctx.Done():
			rec.Release()
			return ctx.Err()
		}
	}
	rr := pgc.ExecParams(ctx, sql, args, nil, nil, formats)
	n := 0
	for rr.NextRow() {
		vals := rr.Values()
		for i, v := range vals {
			if v == nil {
				b.Field(i).AppendNull()
				continue
			}
			if err := decode[i](v); err != nil {
				rr.Close()
				return fmt.Errorf("snapshot of %s, column %s: %w", stream, t.Columns[i].Name, err)
			}
		}
		b.Row(change.OpRead, "")
		n++
		for i, j := range keyIdx {
			lastBuf[i] = append(lastBuf[i][:0], vals[j]...)
		}
		if n == r.cfg.BatchSize {
			if err := flush(n); err != nil {
				rr.Close()
				return err
			}
			n = 0
		}
	}
	if _, err := rr.Close(); err != nil {
		return fmt.Errorf("snapshot of %s: %w", stream, r.cfg.Explain(err))
	}
	if n == 0 {
		return nil
	}
	return flush(n)
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
