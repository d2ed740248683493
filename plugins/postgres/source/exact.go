package source

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

// Exact copies of tables in mode: append and mode: full_row (tables without a key).
//
// A table without a key cannot converge the way keyed tables do when a copy is resumed under a fresh snapshot:
// a row that both the copy and the stream carry is two rows in the destination, and nothing tells them apart.
// So a copy of an append table that cannot run under the slot's own exported snapshot (a resumed copy, after a
// crash or a stop, or a slot that already existed) starts the table over, under a snapshot whose place in the
// log is known exactly:
//
//   - a temporary logical slot is created with EXPORT_SNAPSHOT on a replication session of its own; its
//     consistent point C and the exported snapshot match exactly: a transaction whose commit record is before C
//     is in the snapshot, one at C or later is not (PostgreSQL decodes a slot's transactions from C on by the
//     same rule). The snapshot is imported at once, then the session closes and the slot vanishes with it, so a
//     SIGKILL leaks no slot;
//   - a truncate of the table goes to the destinations before the first row of the new copy (in the same
//     engine entry or an earlier one), emptying what an interrupted copy left there;
//   - the table is copied whole under the imported snapshot, and C is kept in every checkpoint (Position.Copied);
//   - the main slot, still at its own start L <= C (the temporary slot is made later), streams from L: its
//     changes of the table in transactions committed before C are in the copy and are dropped; the others are
//     carried, a truncate included.
//
// A crash anywhere repeats the whole procedure with a new slot, a new C and a new truncate. The price is that an
// interrupted append table is copied again from its first row; keyed tables still resume from their last key
// (under the same imported snapshot, which bounds their overlap exactly).

// appendUnfinished says a table in mode: append or full_row is still to be copied.
func (r *reader) appendUnfinished(pos *Position) bool {
	return slices.ContainsFunc(pos.Tables, func(name string) bool {
		t := r.tables[name]
		return t != nil && t.exact() && !pos.Progress[name].Done
	})
}

// recopyAppend prepares a resumed copy in which append tables are unfinished: it opens the exact snapshot,
// starts those tables over (a truncate for each that has rows in the destinations) and records C in pos.
// It returns the transaction holding the snapshot, which the caller ends.
func (r *reader) recopyAppend(ctx context.Context, pos *Position) (pgx.Tx, error) {
	var names []string
	for _, name := range pos.Tables {
		if t := r.tables[name]; t != nil && t.exact() && !pos.Progress[name].Done {
			names = append(names, name)
		}
	}
	purpose := "before copying " + strings.Join(names, ", ") + " again"
	tx, c, err := r.exactSnapshot(ctx, purpose, func(ctx context.Context, waited time.Duration, bs []blocker) error {
		// The checkpoint this Read began from, with nothing after it: the engine has no frame for it to cover,
		// so it commits nothing and only shows the wait (and the copy's progress so far).
		return r.out.Checkpoint(ctx, serve.Checkpoint{Position: pos.Encode(), RowsDone: pos.Rows,
			Metrics: append(slices.DeleteFunc(r.snapshotMetrics(pos), func(m serve.Metric) bool { return m.Name == notWaiting.Name }),
				waitMetric(waited, bs, purpose))})
	})
	if err != nil {
		return nil, err
	}
	pos.Progress = maps.Clone(pos.Progress)
	if pos.Progress == nil {
		pos.Progress = map[string]TableProgress{}
	}
	pos.Copied = maps.Clone(pos.Copied)
	if pos.Copied == nil {
		pos.Copied = map[string]string{}
	}
	for _, name := range pos.Tables {
		t := r.tables[name]
		if t == nil || !t.exact() || pos.Progress[name].Done {
			continue
		}
		if prog, started := pos.Progress[name]; started {
			// A chunk of the interrupted copy is durable: its rows are in the destinations.
			if err := r.out.Truncate(ctx, name); err != nil {
				tx.Rollback(context.Background())
				return nil, err
			}
			pos.Rows -= prog.Rows
			delete(pos.Progress, name)
			r.log.Info("table without a key: copying it again from its first row under an exact snapshot", "table", name, "rows_dropped", prog.Rows, "snapshot_lsn", c.String())
		}
		pos.Copied[name] = c.String()
	}
	// The keyed tables resume under the same snapshot: transactions committed before C may be in their copy.
	if c > pos.LSNValue() && c > pos.OverlapValue() {
		pos.Overlap = c.String()
	}
	return tx, nil
}

// exactSnapshot opens a REPEATABLE READ transaction on the snapshot exported by a new temporary slot, and
// returns it with the slot's consistent point. purpose and report are createSlot's.
func (r *reader) exactSnapshot(ctx context.Context, purpose string, report slotReport) (pgx.Tx, pglogrepl.LSN, error) {
	repl, err := r.cfg.ConnectReplication(ctx)
	if err != nil {
		return nil, 0, err
	}
	defer repl.Close(context.Background())
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	name := "skippr_copy_" + hex.EncodeToString(b)
	res, err := r.createSlot(ctx, repl, name,
		pglogrepl.CreateReplicationSlotOptions{Temporary: true, Mode: pglogrepl.LogicalReplication, SnapshotAction: "EXPORT_SNAPSHOT"}, purpose, report)
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "53400" { // configuration_limit_exceeded
			return nil, 0, fault.ConfigErr(fmt.Errorf("copy a table in mode: append exactly: create a temporary replication slot: %w", r.cfg.Explain(err)),
				"a table in mode: append whose copy was interrupted (or is added to a running pipeline) is copied under a temporary replication slot: raise max_replication_slots (and max_wal_senders) by one and restart the server, or drop a slot that is no longer needed")
		}
		if fault.ClassOf(err) != fault.Unknown { // the wait's own verdict, or a cancelled Read
			return nil, 0, err
		}
		return nil, 0, fmt.Errorf("copy a table in mode: append exactly: create a temporary replication slot: %w", r.cfg.Explain(err))
	}
	c, err := pglogrepl.ParseLSN(res.ConsistentPoint)
	if err != nil {
		return nil, 0, fmt.Errorf("temporary replication slot %s: consistent point %q: %w", name, res.ConsistentPoint, err)
	}
	// Import now: the exported snapshot dies with the next command on the replication session, or its end.
	tx, err := r.beginSnapshot(ctx, res.SnapshotName)
	if err != nil {
		return nil, 0, err
	}
	return tx, c, nil
}

// Copies while streaming. A table in mode: append added to the tables of a running pipeline, or asked to be
// re-snapshotted, is copied by the same rule, between the transactions the processor streams: the tables of
// Position.Recopy are copied together under one exact snapshot (consistent point C), each starting with a truncate
// when the destinations may hold rows of it. Until its copy begins, every change of such a table is dropped (the
// copy, taken later, holds them); from then on, those of transactions committed before C. The copy's transaction
// takes ACCESS SHARE locks on its tables at once, so a TRUNCATE of one of them commits only after the copy is read
// (or before C, when the copy sees its effect): the stream's truncate never lands among rows it should remove.
// The checkpoint after each chunk carries the stream position and the tables still to copy; a crash starts the
// copy over (new slot, new C, a truncate), and a table that is copied stays so.

// tableChunk is a chunk of a copy while streaming, or the end of a table's copy (done).
type tableChunk struct {
	table string
	c     chunk
	done  bool
}

// recopy is the copy in progress while streaming.
type recopy struct {
	tx     pgx.Tx
	chunks chan tableChunk
	err    chan error
	cancel context.CancelFunc
}

// startRecopy begins copying the tables of p.recopy when no copy is running; between transactions only.
func (p *processor) startRecopy(ctx context.Context) error {
	if p.ac != nil || len(p.recopy) == 0 || p.inTx {
		return nil
	}
	r := p.r
	names := slices.Sorted(maps.Keys(p.recopy))
	purpose := "before copying " + strings.Join(names, ", ")
	tx, c, err := r.exactSnapshot(ctx, purpose, func(ctx context.Context, waited time.Duration, bs []blocker) error {
		// Between transactions, like every checkpoint of the processor: it carries the stream on, and the
		// reason to `skippr status`.
		return p.betweenTransactions(ctx, 0, waitMetric(waited, bs, purpose))
	})
	if err != nil {
		return err
	}
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = r.tables[n].Name.Quoted()
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE `+strings.Join(quoted, ", ")+` IN ACCESS SHARE MODE`); err != nil {
		tx.Rollback(context.Background())
		return fmt.Errorf("copy %s: %w", strings.Join(names, ", "), r.cfg.Explain(err))
	}
	if err := p.flush(ctx); err != nil {
		tx.Rollback(context.Background())
		return err
	}
	for _, n := range names {
		prog := p.recopy[n]
		if prog.Truncate {
			if err := r.out.Truncate(ctx, n); err != nil {
				tx.Rollback(context.Background())
				return err
			}
		}
		p.recopy[n] = RecopyProgress{Truncate: true} // from here on the destinations may hold rows of this copy
		p.copied[n] = c
		r.log.Info("copying append table while streaming, under an exact snapshot", "table", n, "truncated", prog.Truncate, "snapshot_lsn", c.String())
	}
	r.emitted = true
	cctx, cancel := context.WithCancel(ctx)
	ac := &recopy{tx: tx, chunks: make(chan tableChunk), err: make(chan error, 1), cancel: cancel}
	go func() {
		ac.err <- func() error {
			defer close(ac.chunks)
			for _, n := range names {
				ch := make(chan chunk)
				qerr := make(chan error, 1)
				go func() {
					qerr <- r.queryChunks(cctx, tx, r.tables[n], nil, ch, 0)
					close(ch)
				}()
				for c := range ch {
					select {
					case ac.chunks <- tableChunk{table: n, c: c}:
					case <-cctx.Done():
						c.rec.Release()
					}
				}
				if err := <-qerr; err != nil {
					return err
				}
				select {
				case ac.chunks <- tableChunk{table: n, done: true}:
				case <-cctx.Done():
					return cctx.Err()
				}
			}
			return nil
		}()
	}()
	p.ac = ac
	return nil
}

// recopyChunks is the channel of the copy's chunks when one may be taken now (between transactions), else nil.
func (p *processor) recopyChunks() <-chan tableChunk {
	if p.ac == nil || p.inTx {
		return nil
	}
	return p.ac.chunks
}

// recopyChunk sends a chunk of the copy (or ends a table's copy, or the copy) and the checkpoint after it.
func (p *processor) recopyChunk(ctx context.Context, tc tableChunk, ok bool) error {
	r := p.r
	if !ok {
		err := <-p.ac.err
		p.stopRecopy()
		return err
	}
	if tc.done {
		rows := p.recopy[tc.table].Rows
		r.log.Info("append table copied", "table", tc.table, "rows", rows)
		delete(p.recopy, tc.table)
		p.ended = append(p.ended, copyMetrics(tc.table, rows, rows, false)...)
	} else {
		err := r.emitBatch(ctx, tc.table, nil, tc.c.rec)
		tc.c.rec.Release()
		if err != nil {
			return err
		}
		prog := p.recopy[tc.table]
		prog.Rows += int64(tc.c.rows)
		p.recopy[tc.table] = prog
		p.rows += int64(tc.c.rows)
	}
	return p.betweenTransactions(ctx, 0, notWaiting)
}

// recopyMetrics are the progress of the append tables to copy while streaming, as a re-snapshot's gauges: `skippr
// status` and the metrics show them as one (copyMetrics), from the request (or the table's addition) on.
func (p *processor) recopyMetrics() []serve.Metric {
	var out []serve.Metric
	for _, name := range slices.Sorted(maps.Keys(p.recopy)) {
		rows, total := p.recopy[name].Rows, int64(0)
		if t := p.r.tables[name]; t != nil {
			total = t.Estimate
		}
		out = append(out, copyMetrics(name, rows, total, true)...)
	}
	return out
}

// stopRecopy ends the copy's reader and transaction.
func (p *processor) stopRecopy() {
	if p.ac == nil {
		return
	}
	p.ac.cancel()
	for tc := range p.ac.chunks {
		if tc.c.rec != nil {
			tc.c.rec.Release()
		}
	}
	p.ac.tx.Rollback(context.Background())
	p.ac = nil
}
