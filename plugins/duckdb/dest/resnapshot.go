package dest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/rowmeta"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/plugins/duckdb/ducksql"
)

// ResnapshotTable records, per pipeline and stream, an open re-snapshot: the sequence number that applied its
// begin mark and the table that collects the keys written since.
//
// DuckDB has no row version a later statement could compare (Postgres's xmin), so "rows received since the
// begin" is kept as data: while a stream's re-snapshot is open, every merge into its table also appends the
// staged keys (upserts and deletes alike) to a key table of its own. At the end mark the rows whose key is not
// in it are deleted, and the key table and the begin record are dropped. A side table rather than a column on
// the stream's table: readers of the table see exactly the stream's columns, and the cost (one key per change)
// is paid only while a re-snapshot is open.
//
// Marks are applied at their place in the log: the rows of the entry before a mark are written first. Every
// step runs in the apply's transaction, with the fence, so a replay of an end mark after a crash is either
// skipped (its apply committed: the begin record is gone) or runs in full (it did not: nothing was deleted).
const ResnapshotTable = "_skippr_resnapshot"

// resnapshotName is the begin records' table's qualified name.
func resnapshotName(s Settings) string {
	return ducksql.Ident(s.Schema) + "." + ducksql.Ident(ResnapshotTable)
}

// keysTable names the table that collects a stream's keys during its re-snapshot: one per pipeline and stream
// (hashed, since both may hold any character), recognisable by its prefix.
func keysTable(pipeline, stream string) string {
	h := sha256.Sum256([]byte(pipeline + "\x00" + stream))
	return ResnapshotTable + "_keys_" + hex.EncodeToString(h[:8])
}

// loadResnapshots reads the pipeline's open re-snapshots: stream → key table.
func (a *applier) loadResnapshots(ctx context.Context, pipeline string) error {
	a.open = map[string]string{}
	ok, err := tableExists(ctx, a.conn, a.s.Schema, ResnapshotTable)
	if err != nil || !ok {
		return err
	}
	rows, err := a.conn.QueryContext(ctx, "SELECT stream, keys FROM "+resnapshotName(a.s)+" WHERE pipeline = ?", pipeline)
	if err != nil {
		return fmt.Errorf("read %s: %w", resnapshotName(a.s), err)
	}
	defer rows.Close()
	for rows.Next() {
		var stream, keys string
		if err := rows.Scan(&stream, &keys); err != nil {
			return err
		}
		a.open[stream] = keys
	}
	return rows.Err()
}

// resnapshotMark applies a begin or end mark of the stream.
func (a *applier) resnapshotMark(ctx context.Context, pipeline string, seq uint64, it serve.Item) error {
	switch it.Resnapshot {
	case serve.ResnapshotBegin:
		if _, ok := a.open[it.Stream]; ok {
			return nil // a begin while one is open (a request made again) keeps the older one: it saw more
		}
		if err := a.exec(ctx, "CREATE TABLE IF NOT EXISTS "+resnapshotName(a.s)+
			" (pipeline VARCHAR NOT NULL, stream VARCHAR NOT NULL, begin_sequence UBIGINT NOT NULL, keys VARCHAR NOT NULL, PRIMARY KEY (pipeline, stream))"); err != nil {
			return fmt.Errorf("create %s: %w", resnapshotName(a.s), err)
		}
		keys := keysTable(pipeline, it.Stream)
		// A key table left by an earlier begin of this stream that never ended (the record removed by hand)
		// must not count its keys as received now.
		if err := a.exec(ctx, "DROP TABLE IF EXISTS "+a.qualify(keys)); err != nil {
			return fmt.Errorf("re-snapshot of %s begins: %w", it.Stream, err)
		}
		if err := a.exec(ctx, "INSERT INTO "+resnapshotName(a.s)+" VALUES (?, ?, ?, ?)", pipeline, it.Stream, seq, keys); err != nil {
			return fmt.Errorf("re-snapshot of %s begins: %w", it.Stream, err)
		}
		a.open[it.Stream] = keys
	case serve.ResnapshotEnd:
		keys, ok := a.open[it.Stream]
		if !ok {
			return nil // no begin applied here: nothing is known to be stale
		}
		removed, err := a.removeUnseen(ctx, it.Stream, keys)
		if err != nil {
			return fmt.Errorf("re-snapshot of %s ends: remove the rows the source no longer has: %w", it.Stream, err)
		}
		if err := a.exec(ctx, "DROP TABLE IF EXISTS "+a.qualify(keys)); err != nil {
			return fmt.Errorf("re-snapshot of %s ends: %w", it.Stream, err)
		}
		if err := a.exec(ctx, "DELETE FROM "+resnapshotName(a.s)+" WHERE pipeline = ? AND stream = ?", pipeline, it.Stream); err != nil {
			return fmt.Errorf("re-snapshot of %s ends: %w", it.Stream, err)
		}
		delete(a.open, it.Stream)
		a.log.Info("re-snapshot applied", "stream", it.Stream, "rows_removed", removed)
	}
	return nil
}

func (a *applier) qualify(table string) string {
	return ducksql.Ident(a.s.Schema) + "." + ducksql.Ident(table)
}

// removeUnseen deletes the rows of the stream's table whose key was not written since the begin. No key table
// means no row arrived since: every row goes.
func (a *applier) removeUnseen(ctx context.Context, stream, keys string) (int64, error) {
	cols, err := a.columns(ctx, stream)
	if err != nil || cols == nil {
		return 0, err
	}
	name := a.tableName(stream)
	a.dirty[stream] = true
	have, err := tableExists(ctx, a.conn, a.s.Schema, keys)
	if err != nil {
		return 0, err
	}
	soft := a.s.Meta(stream).SoftDelete
	q := "DELETE FROM " + name + " AS t"
	if soft {
		// The rows the source no longer has are marked deleted, as their deletes would have been (rowmeta).
		cols, vals := a.metaColumns(stream, strconv.Itoa(int(change.OpDelete)), "NULL") // no source change: no commit time
		sets := make([]string, len(cols))
		for i, c := range cols {
			sets[i] = ducksql.Ident(c) + " = " + vals[i]
		}
		q = "UPDATE " + name + " AS t SET " + strings.Join(sets, ", ") + " WHERE t." + ducksql.Ident(rowmeta.Deleted) + " IS NOT TRUE"
	}
	if have {
		key, err := a.keyColumns(ctx, keys)
		if err != nil {
			return 0, err
		}
		on := make([]string, len(key))
		for i, k := range key {
			on[i] = "k." + ducksql.Ident(k) + " = t." + ducksql.Ident(k)
		}
		unseen := "NOT EXISTS (SELECT 1 FROM " + a.qualify(keys) + " AS k WHERE " + strings.Join(on, " AND ") + ")"
		if soft {
			q += " AND " + unseen
		} else {
			q += " WHERE " + unseen
		}
	}
	res, err := a.conn.ExecContext(ctx, q)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// keyColumns reads the key columns a key table holds: those noteKeys took from the stream's key.
func (a *applier) keyColumns(ctx context.Context, keys string) ([]string, error) {
	key, err := columnNames(ctx, a.conn, a.s.Schema, keys)
	if err != nil {
		return nil, err
	}
	if len(key) == 0 {
		return nil, fmt.Errorf("key table %s has no columns", a.qualify(keys))
	}
	return key, nil
}

// noteKeys adds the keys staged for the stream's table to its re-snapshot's key table, if one is open.
func (a *applier) noteKeys(ctx context.Context, stream string, key []string) error {
	keys, ok := a.open[stream]
	if !ok {
		return nil
	}
	if len(key) == 0 {
		return fault.DataErr(fmt.Errorf("stream %s has no primary key, so a re-snapshot cannot tell which rows it received", stream),
			"add a primary key to the source table (or name its key columns in the source's settings) before asking for a re-snapshot")
	}
	cols := quoteAll(key)
	if err := a.exec(ctx, "CREATE TABLE IF NOT EXISTS "+a.qualify(keys)+" AS SELECT "+cols+" FROM temp.main."+stageTable+" LIMIT 0"); err != nil {
		return fmt.Errorf("re-snapshot of %s: create its key table: %w", stream, err)
	}
	if err := a.exec(ctx, "INSERT INTO "+a.qualify(keys)+" SELECT DISTINCT "+cols+" FROM temp.main."+stageTable); err != nil {
		return fmt.Errorf("re-snapshot of %s: note the keys received: %w", stream, err)
	}
	return nil
}
