package source

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
)

// Exact copies of tables in mode: append.
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

// appendUnfinished says a table in mode: append is still to be copied.
func (r *reader) appendUnfinished(pos *Position) bool {
	return slices.ContainsFunc(pos.Tables, func(name string) bool {
		t := r.tables[name]
		return t != nil && t.Append && !pos.Progress[name].Done
	})
}

// recopyAppend prepares a resumed copy in which append tables are unfinished: it opens the exact snapshot,
// starts those tables over (a truncate for each that has rows in the destinations) and records C in pos.
// It returns the transaction holding the snapshot, which the caller ends.
func (r *reader) recopyAppend(ctx context.Context, pos *Position) (pgx.Tx, error) {
	tx, c, err := r.exactSnapshot(ctx)
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
		if t == nil || !t.Append || pos.Progress[name].Done {
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
			r.log.Info("append table: copying it again from its first row under an exact snapshot", "table", name, "rows_dropped", prog.Rows, "snapshot_lsn", c.String())
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
// returns it with the slot's consistent point.
func (r *reader) exactSnapshot(ctx context.Context) (pgx.Tx, pglogrepl.LSN, error) {
	repl, err := r.cfg.ConnectReplication(ctx)
	if err != nil {
		return nil, 0, err
	}
	defer repl.Close(context.Background())
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	name := "skippr_copy_" + hex.EncodeToString(b)
	res, err := pglogrepl.CreateReplicationSlot(ctx, repl, name, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Temporary: true, Mode: pglogrepl.LogicalReplication, SnapshotAction: "EXPORT_SNAPSHOT"})
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "53400" { // configuration_limit_exceeded
			return nil, 0, fault.ConfigErr(fmt.Errorf("copy a table in mode: append exactly: create a temporary replication slot: %w", r.cfg.Explain(err)),
				"a table in mode: append whose copy was interrupted (or is added to a running pipeline) is copied under a temporary replication slot: raise max_replication_slots (and max_wal_senders) by one and restart the server, or drop a slot that is no longer needed")
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
