package source

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/skippr-dev/skippr/plugin-sdk/dblog"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

// Re-snapshot while streaming (`skippr resnapshot`, ReadRequest.Resnapshot): the watermark method of DBLog and
// Debezium's incremental snapshots, run by the processor between the transactions it streams.
//
// For the table at hand, one chunk at a time: the processor notes the stream's point S, writes a low watermark
// through the slot, reads the next batch_size rows after the last key copied (READ COMMITTED, so the rows are
// those committed when the select starts), and writes a high watermark. It goes on streaming; every key of the
// table changed in the log from S on is remembered. When the high watermark comes out of the slot, the chunk's
// rows whose key was remembered are dropped — the log has sent a change of them at least as new, and it follows
// the change it sent — and the rest go out as snapshot reads, then the checkpoint after the watermark carries the
// last key. A SIGKILL loses at most the chunk in flight: the next Read starts from that checkpoint, whose progress
// names the last key copied, and writes new watermarks (with a fresh id, so old ones in the replayed log are
// ignored).
//
// The window starts at S, before the low watermark: a transaction whose commit is in the WAL before the low mark
// may still be invisible to the chunk's select when the committing backend has not yet left the proc array (it
// waits for a synchronous standby, say); its keys are then remembered all the same. Dropping more keys than the
// low..high window is always safe: each dropped key has a change in the log after the begin mark, and the newest
// such change is the row's current state unless a later change follows.
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

// ResnapshotProgress is how far the re-snapshot of one table has come.
type ResnapshotProgress struct {
	Key   []string `json:"key,omitempty"` // the last key copied (text forms), nil before the first chunk
	Rows  int64    `json:"rows,omitempty"`
	Total int64    `json:"total,omitempty"` // the planner's estimate when the copy began
	Begun bool     `json:"begun,omitempty"` // the begin mark is out (before this checkpoint)
}

// watermark is the payload of a watermark message.
type watermark struct {
	ID    string `json:"id"`
	Table string `json:"table"`
	High  bool   `json:"high,omitempty"`
}

// resnapper runs the re-snapshots of one Read.
type resnapper struct {
	r        *reader
	progress map[string]ResnapshotProgress
	nonce    string // watermarks of this Read carry it: the ones of a replayed log are someone else's
	seq      int
	inflight *pendingChunk
}

// pendingChunk is a chunk read and waiting for its high watermark to come out of the slot.
type pendingChunk struct {
	id     string
	table  string
	c      chunk
	window map[string]bool // keys of the table changed in the log since the chunk was started
	low    bool            // its low watermark came out
}

func newResnapper(r *reader, progress map[string]ResnapshotProgress) *resnapper {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return &resnapper{r: r, progress: maps.Clone(progress), nonce: hex.EncodeToString(b)}
}

// active says a table is being copied again.
func (s *resnapper) active() bool { return len(s.progress) > 0 }

// snapshot is the progress for a checkpoint.
func (s *resnapper) snapshot() map[string]ResnapshotProgress {
	if len(s.progress) == 0 {
		return nil
	}
	out := make(map[string]ResnapshotProgress, len(s.progress))
	for k, v := range s.progress {
		v.Key = slices.Clone(v.Key)
		out[k] = v
	}
	return out
}

// saw remembers a change of the table whose chunk is in flight.
func (s *resnapper) saw(rel *relation, vals [][]byte) {
	if s.inflight == nil || rel.stream != s.inflight.table {
		return
	}
	k := make([][]byte, len(rel.keyIdx))
	for i, j := range rel.keyIdx {
		k[i] = vals[j]
	}
	s.inflight.window[keyText(k)] = true
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
func (s *resnapper) step(ctx context.Context, p *processor) error {
	if s.inflight != nil || len(s.progress) == 0 || p.inTx {
		return nil
	}
	r := s.r
	name := slices.Sorted(maps.Keys(s.progress))[0]
	t := r.tables[name]
	prog := s.progress[name]
	if !prog.Begun {
		if err := p.flush(ctx); err != nil {
			return err
		}
		if err := r.out.Resnapshot(ctx, name, false); err != nil {
			return err
		}
		prog.Begun, prog.Total = true, t.Estimate
		s.progress[name] = prog
		r.emitted = true
		r.log.Info("re-snapshot begins", "table", name, "rows_estimate", t.Estimate, "chunk_rows", r.cfg.BatchSize)
	}
	s.seq++
	pc := &pendingChunk{id: fmt.Sprintf("%s.%d", s.nonce, s.seq), table: name, window: map[string]bool{}}
	s.inflight = pc
	if err := s.emitWatermark(ctx, watermark{ID: pc.id, Table: name}); err != nil {
		return err
	}
	c, err := s.readChunk(ctx, t, prog.Key)
	if err != nil {
		return err
	}
	pc.c = c
	if r.chunkRead != nil {
		r.chunkRead(ctx, name, c.keys)
	}
	return s.emitWatermark(ctx, watermark{ID: pc.id, Table: name, High: true})
}

func (s *resnapper) emitWatermark(ctx context.Context, w watermark) error {
	b, _ := json.Marshal(w)
	if _, err := s.r.pool.Exec(ctx, `SELECT pg_logical_emit_message(true, $1, $2)`, resnapshotPrefix, string(b)); err != nil {
		return fmt.Errorf("re-snapshot of %s: write a watermark: %w", w.Table, s.r.cfg.Explain(err))
	}
	return nil
}

// readChunk reads the next chunk of t after key under a snapshot of its own.
func (s *resnapper) readChunk(ctx context.Context, t *table, key []string) (chunk, error) {
	r := s.r
	tx, err := r.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted, AccessMode: pgx.ReadOnly})
	if err != nil {
		return chunk{}, r.cfg.Explain(err)
	}
	defer tx.Rollback(context.Background())
	ch := make(chan chunk, 1)
	if err := r.queryChunks(ctx, tx, t, key, ch, r.cfg.BatchSize); err != nil {
		return chunk{}, fmt.Errorf("re-snapshot of %s: %w", t.Name, err)
	}
	select {
	case c := <-ch:
		return c, nil
	default:
		return chunk{}, nil // past the last key: the table is done
	}
}

// message handles a logical decoding message: our watermarks, anything else is skipped.
func (s *resnapper) message(ctx context.Context, p *processor, m *pglogrepl.LogicalDecodingMessage) error {
	if m.Prefix != resnapshotPrefix || s.inflight == nil {
		return nil
	}
	var w watermark
	if err := json.Unmarshal(m.Content, &w); err != nil || w.ID != s.inflight.id {
		return nil // another Read's, or another pipeline's
	}
	pc := s.inflight
	if !w.High {
		pc.low = true
		return nil
	}
	if !pc.low {
		return fmt.Errorf("re-snapshot of %s: watermark %s: the high mark came out of the slot before the low one", pc.table, pc.id)
	}
	s.inflight = nil
	return s.emitChunk(ctx, p, pc)
}

// emitChunk sends the chunk's rows the log did not change since the chunk started, and the progress after it.
func (s *resnapper) emitChunk(ctx context.Context, p *processor, pc *pendingChunk) error {
	r := s.r
	if err := p.flush(ctx); err != nil {
		return err
	}
	prog := s.progress[pc.table]
	t := r.tables[pc.table]
	kept := int64(0)
	if pc.c.rec != nil {
		defer pc.c.rec.Release()
		// Runs of kept rows go out as slices of the chunk: no copy.
		n, err := dblog.KeptRuns(pc.c.keys, pc.window, func(start, end int) error {
			sl := pc.c.rec.NewSlice(int64(start), int64(end))
			defer sl.Release()
			return r.emitBatch(ctx, pc.table, t.Key, sl)
		})
		if err != nil {
			return err
		}
		kept = n
		prog.Key = pc.c.last
	}
	prog.Rows += kept
	p.rows += kept
	r.emitted = true
	if pc.c.rows < r.cfg.BatchSize {
		if err := r.out.Resnapshot(ctx, pc.table, true); err != nil {
			return err
		}
		delete(s.progress, pc.table)
		p.ended = append(p.ended, copyMetrics(pc.table, prog.Rows, prog.Rows, false)...)
		r.log.Info("re-snapshot done", "table", pc.table, "rows", prog.Rows)
		return nil
	}
	s.progress[pc.table] = prog
	return nil
}

// metrics are each table's re-snapshot progress.
func (s *resnapper) metrics() []serve.Metric {
	var out []serve.Metric
	for _, name := range slices.Sorted(maps.Keys(s.progress)) {
		p := s.progress[name]
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
		if r.tables[name].Append {
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
		_, err := r.pool.Exec(ctx, `ALTER PUBLICATION `+pgx.Identifier{pub}.Sanitize()+` ADD TABLE `+t.Name.Quoted())
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
