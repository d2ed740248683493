package source

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/skippr-dev/skippr/plugin-sdk/dblog"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

// Re-snapshot while streaming (`skippr resnapshot`, ReadRequest.Resnapshot): the watermark method of DBLog and
// Debezium's incremental snapshots, run by the processor between the transactions it streams. plugin-sdk/dblog
// runs it (its package doc has the method and why it is safe); this file does what is Postgres's.
//
// The processor notes the stream's point S when it starts a chunk, writes a low watermark through the slot,
// reads the next batch_size rows after the last key copied (READ COMMITTED, so the rows are those committed when
// the select starts), and writes a high watermark. Every key of the table changed in the log from S on is
// reported (saw). A SIGKILL loses at most the chunk in flight: the next Read starts from the checkpoint whose
// progress names the last key copied, and writes new watermarks (with a fresh id, so old ones in the replayed
// log are ignored).
//
// The window starts at S, before the low watermark: a transaction whose commit is in the WAL before the low mark
// may still be invisible to the chunk's select when the committing backend has not yet left the proc array (it
// waits for a synchronous standby, say); its keys are then remembered all the same.
//
// The watermarks are transactional messages (pg_logical_emit_message(true, …)): each commits on its own, and a
// commit flushes the WAL, so the walsender sends the mark at once. A non-transactional message waits for the WAL
// writer (up to wal_writer_delay per mark; PostgreSQL 15 has no flush argument), and its place in the stream would
// not be a transaction boundary, where checkpoints must be. The cost is one transaction id per mark.
//
// The begin mark goes out before the first chunk's window opens, the end mark after the last chunk, so a
// destination receives every row the table holds, by chunk or by change, between the two; at the end it removes
// the others. Progress is in every checkpoint (Position.Resnapshot), with resnapshot_rows, resnapshot_rows_total
// and resnapshot_copying gauges for status and metrics (copyMetrics). While a table is being copied the source
// never reports itself idle, so `sync --once` waits for the end mark.

// resnapshotPrefix is the prefix of our watermark messages; messages with other prefixes are ignored.
const resnapshotPrefix = "skippr-resnapshot"

// ResnapshotProgress is how far the re-snapshot of one table has come; its key is in text forms.
type ResnapshotProgress = dblog.Progress

// resnapper is the processor's side of the re-snapshots of one Read: its dblog.Copier runs them and calls back
// here (dblog.Source) for what is Postgres's.
type resnapper struct {
	p *processor
	c *dblog.Copier
}

func newResnapper(p *processor, progress map[string]ResnapshotProgress) *resnapper {
	s := &resnapper{p: p}
	s.c = dblog.New(s, dblog.Config{ChunkRows: p.r.cfg.BatchSize, Log: "slot"}, progress)
	return s
}

// active says a table is being copied again.
func (s *resnapper) active() bool { return s.c.Active() }

// snapshot is the progress for a checkpoint.
func (s *resnapper) snapshot() map[string]ResnapshotProgress { return s.c.Progress() }

// close releases a chunk in flight.
func (s *resnapper) close() { s.c.Close() }

// saw remembers a change of the table whose chunk is in flight.
func (s *resnapper) saw(rel *relation, vals [][]byte) {
	if !s.c.Watching(rel.stream) {
		return
	}
	k := make([][]byte, len(rel.keyIdx))
	for i, j := range rel.keyIdx {
		k[i] = vals[j]
	}
	s.c.Saw(rel.stream, keyText(k))
}

// keyText is a key's text forms joined: the same bytes for a key from the slot (pgoutput sends text) and from a
// select (key columns are read in text).
func keyText(k [][]byte) string {
	var b strings.Builder
	for i, v := range k {
		if i > 0 {
			b.WriteByte(0)
		}
		b.Write(v)
	}
	return b.String()
}

// step starts the next chunk when none is in flight. It runs between transactions only.
func (s *resnapper) step(ctx context.Context) error {
	if s.p.inTx {
		return nil
	}
	return s.c.Step(ctx)
}

// message handles a logical decoding message: our watermarks, anything else is skipped.
func (s *resnapper) message(ctx context.Context, m *pglogrepl.LogicalDecodingMessage) error {
	if m.Prefix != resnapshotPrefix {
		return nil
	}
	return s.c.Mark(ctx, m.Content)
}

// Prepare: a table named in tables is always there (a dropped one fails the stream first); one captured by a
// pattern and released since (patterns.go) has nothing left to copy.
func (s *resnapper) Prepare(_ context.Context, name string) error {
	if s.p.r.tables[name] == nil {
		return dblog.ErrGone
	}
	return nil
}

// Begin sends what the transaction built so far, then the begin mark.
func (s *resnapper) Begin(ctx context.Context, name string) (int64, error) {
	r, t := s.p.r, s.p.r.tables[name]
	if err := s.p.flush(ctx); err != nil {
		return 0, err
	}
	if err := r.out.Resnapshot(ctx, name, false); err != nil {
		return 0, err
	}
	r.emitted = true
	r.log.Info("re-snapshot begins", "table", name, "rows_estimate", t.Estimate, "chunk_rows", r.cfg.BatchSize)
	return t.Estimate, nil
}

// WriteMark writes a watermark through the slot as a transactional logical decoding message.
func (s *resnapper) WriteMark(ctx context.Context, table, mark string) error {
	r := s.p.r
	if _, err := r.pool.Exec(ctx, `SELECT pg_logical_emit_message(true, $1, $2)`, resnapshotPrefix, mark); err != nil {
		return fmt.Errorf("re-snapshot of %s: write a watermark: %w", table, r.cfg.Explain(err))
	}
	return nil
}

// ReadChunk reads the next chunk of the table after key under a snapshot of its own.
func (s *resnapper) ReadChunk(ctx context.Context, name string, key []string) (dblog.Chunk, error) {
	r := s.p.r
	t := r.tables[name]
	tx, err := r.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted, AccessMode: pgx.ReadOnly})
	if err != nil {
		return dblog.Chunk{}, r.cfg.Explain(err)
	}
	defer tx.Rollback(context.Background())
	ch := make(chan chunk, 1)
	if err := r.queryChunks(ctx, tx, t, key, ch, r.cfg.BatchSize); err != nil {
		return dblog.Chunk{}, fmt.Errorf("re-snapshot of %s: %w", t.Name, err)
	}
	var c chunk
	select {
	case c = <-ch:
	default: // past the last key: the table is done
	}
	if r.chunkRead != nil {
		r.chunkRead(ctx, name, c.keys)
	}
	return dblog.Chunk{Rec: c.rec, Keys: c.keys, Last: c.last, Rows: c.rows}, nil
}

// Settle sends what the stream built before the high mark.
func (s *resnapper) Settle(ctx context.Context, _ string) (bool, error) { return true, s.p.flush(ctx) }

// Emit sends kept rows of a chunk as snapshot reads.
func (s *resnapper) Emit(ctx context.Context, name string, rows arrow.RecordBatch) error {
	return s.p.r.emitBatch(ctx, name, s.p.r.tables[name].Key, rows)
}

// Copied counts the chunk's rows into the stream's and sends the end mark after the last chunk.
func (s *resnapper) Copied(ctx context.Context, name string, prog ResnapshotProgress, kept int64, done bool) error {
	p, r := s.p, s.p.r
	p.rows += kept
	r.emitted = true
	if !done {
		return nil
	}
	if err := r.out.Resnapshot(ctx, name, true); err != nil {
		return err
	}
	p.ended = append(p.ended, copyMetrics(name, prog.Rows, prog.Rows, false)...)
	r.log.Info("re-snapshot done", "table", name, "rows", prog.Rows)
	return nil
}

// metrics are each table's re-snapshot progress.
func (s *resnapper) metrics() []serve.Metric {
	var out []serve.Metric
	progress := s.c.Progress()
	for _, name := range slices.Sorted(maps.Keys(progress)) {
		p := progress[name]
		out = append(out, copyMetrics(name, p.Rows, p.Total, true)...)
	}
	return out
}

// addResnapshots takes the streams of a Read's request into the position (one already in progress stays where it
// is) and the tables added to the settings since the checkpoint, which are copied the same way.
func (r *reader) addResnapshots(ctx context.Context, pos *Position, requested []string) error {
	var added []string
	for _, name := range r.tableNames() {
		if !slices.Contains(pos.Tables, name) {
			added = append(added, name)
		}
	}
	if pos.Phase != PhaseStream {
		if len(added) > 0 {
			// A retry meets the same checkpoint and the same settings: only a person can end this.
			return fault.ConfigErr(fmt.Errorf("the tables changed while the initial snapshot was running (checkpoint: %s; settings: %s)",
				strings.Join(pos.Tables, ", "), strings.Join(r.tableNames(), ", ")),
				"restore the old table list and let the snapshot finish (skippr status shows it), then add the tables")
		}
		// The initial snapshot copies every table anyway; a request is carried to the stream phase.
		requested = slices.DeleteFunc(slices.Clone(requested), func(s string) bool { _, ok := pos.Resnapshot[s]; return ok })
	}
	for _, name := range requested {
		if !slices.Contains(r.tableNames(), name) {
			return fault.ConfigErr(fmt.Errorf("re-snapshot of %s: not among the configured tables (%s)", name, strings.Join(r.tableNames(), ", ")),
				"add the table to the source's tables (a newly added table is copied on its own), or remove the request file under the pipeline's state directory")
		}
	}
	if len(added) > 0 {
		if err := r.publish(ctx, added); err != nil {
			return err
		}
		r.log.Info("tables added to the pipeline: copying them while streaming", "tables", strings.Join(added, ", "))
		pos.Tables = r.tableNames()
	}
	for _, name := range append(added, requested...) {
		if r.tables[name].exact() {
			// No key to tell the copy's rows from the stream's: an exact copy instead (exact.go), after a truncate
			// when the destinations hold rows of the table already.
			if pos.Recopy == nil {
				pos.Recopy = map[string]RecopyProgress{}
			}
			prog := pos.Recopy[name]
			prog.Truncate = prog.Truncate || !slices.Contains(added, name)
			pos.Recopy[name] = prog
			continue
		}
		if pos.Resnapshot == nil {
			pos.Resnapshot = map[string]ResnapshotProgress{}
		}
		if _, ok := pos.Resnapshot[name]; !ok {
			pos.Resnapshot[name] = ResnapshotProgress{}
		}
	}
	return nil
}

// publish adds tables to the publication when this plugin created it; a publication made by hand must already
// cover them (check says what it lacks).
func (r *reader) publish(ctx context.Context, names []string) error {
	var ours, all bool
	err := r.pool.QueryRow(ctx, `SELECT coalesce(obj_description(oid, 'pg_publication') = $2, false), puballtables FROM pg_publication WHERE pubname = $1`,
		r.cfg.Publication, publicationComment).Scan(&ours, &all)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return r.cfg.Explain(err)
	}
	if all {
		return nil
	}
	var tables []*table
	for _, n := range names {
		tables = append(tables, r.tables[n])
	}
	if !ours {
		if p := publicationProblems(ctx, r.pool, r.cfg, tables, false); len(p) > 0 {
			return p
		}
		return nil
	}
	for _, t := range tables {
		pub := r.cfg.Publication
		if t.Append {
			// The append publication must have existed at the stream's position, or pgoutput (PostgreSQL < 18)
			// fails on the first change before its creation: it is created with the pipeline (ensurePublication).
			pub = r.cfg.AppendPublication()
			var exists bool
			if err := r.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`, pub).Scan(&exists); err != nil {
				return r.cfg.Explain(err)
			}
			if !exists {
				return fault.ConfigErr(Problems{fmt.Sprintf("table %s is in mode: append, but publication %s does not exist: this pipeline was started without it, and its slot cannot decode a publication created after its position", t.Name, pub)},
					"sync the table in a pipeline of its own (a new pipeline creates its append publication with its slot)")
			}
		}
		_, err := r.pool.Exec(ctx, `ALTER PUBLICATION `+pgx.Identifier{pub}.Sanitize()+` ADD TABLE `+t.Name.Quoted()+t.publicationFilter())
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42710" {
			continue // already a member
		}
		if err != nil {
			return fmt.Errorf("add %s to publication %s: %w", t.Name, pub, r.cfg.Explain(err))
		}
	}
	return nil
}
