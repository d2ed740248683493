package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/jackc/pgx/v5"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/client"
	pluginv2 "github.com/skippr-dev/skippr/plugin-sdk/proto/skippr/plugin/v2"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
	"github.com/skippr-dev/skippr/plugin-sdk/rowmeta/rowmetatest"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// TestHistory runs the SDK's history check (rowmetatest.CheckHistory) through the plugin process: with
// history: true every change lands in items_history once, in order, whatever the cut of the sequence into
// ranges; replays and ranges overlapping the fence append nothing; the mirror is as rowmetatest expects.
func TestHistory(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	c := startPlugin(t)
	conn := db.Connect(t)
	for _, tc := range rowmetatest.HistoryCases() {
		t.Run(tc.Name, func(t *testing.T) {
			rowmetatest.CheckHistory(t, tc, func(t *testing.T, name string) rowmetatest.Target {
				schema := "hist_" + tc.Name + "_" + name
				extra := map[string]any{"schema": schema}
				maps.Copy(extra, tc.Settings)
				return rowmetatest.Target{Apply: rowmetatest.ClientApply(c, settings(db, extra), "p"), Read: readSchemaTable(conn, schema)}
			})
		})
	}
}

// readSchemaTable is a rowmetatest.Target's Read of the tables of schema.
func readSchemaTable(conn *pgx.Conn, schema string) func(ctx context.Context, table string) ([]string, []map[string]any, error) {
	return func(ctx context.Context, table string) ([]string, []map[string]any, error) {
		rows, err := conn.Query(ctx, "SELECT * FROM "+pgx.Identifier{schema, table}.Sanitize())
		if err != nil {
			return nil, nil, err
		}
		defer rows.Close()
		var cols []string
		for _, f := range rows.FieldDescriptions() {
			cols = append(cols, f.Name)
		}
		var out []map[string]any
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				return nil, nil, err
			}
			m := map[string]any{}
			for i, v := range vals {
				m[cols[i]] = v
			}
			out = append(out, m)
		}
		return cols, out, rows.Err()
	}
}

// TestHistoryKilledMidApply: the plugin is killed (SIGKILL) while a range is being written, its transaction
// open with history rows in it; a new plugin process applies the range again, and the history holds every
// change exactly once (nothing of the killed attempt survives), and a further replay appends nothing.
func TestHistoryKilledMidApply(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	set := settings(db, map[string]any{"schema": "hist_kill", "history": true})
	// 40 entries of 2,000 changes: long enough that the kill lands inside the transaction.
	const nEntries, perEntry = 40, 2000
	entries := make([][]rowmetatest.Change, nEntries)
	for e := range entries {
		for j := range perEntry {
			op := change.OpInsert
			if e > 0 {
				op = change.OpUpdate
			}
			entries[e] = append(entries[e], rowmetatest.Change{Op: op, ID: int64(j), V: fmt.Sprintf("e%d", e)})
		}
	}
	items := rowmetatest.Items(entries, 1, nEntries)
	defer rowmetatest.Release(items)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	c := startPlugin(t)
	done := make(chan error, 1)
	go func() {
		_, err := rowmetatest.ClientApply(c, set, "p")(ctx, 1, nEntries, items)
		done <- err
	}()
	// Wait for the apply's transaction to have written something (it has a transaction id), then kill.
	var writing bool
	for !writing {
		db.QueryRow(t, []any{&writing}, `SELECT count(*) > 0 FROM pg_stat_activity WHERE datname = current_database() AND backend_xid IS NOT NULL AND pid <> pg_backend_pid()`)
		select {
		case err := <-done:
			t.Fatalf("the apply ended (%v) before the test saw its transaction: make the range longer", err)
		default:
		}
	}
	kill(t, c)
	if err := <-done; err == nil {
		t.Fatal("the apply of the killed plugin succeeded")
	}

	c2 := startPlugin(t)
	apply := rowmetatest.ClientApply(c2, set, "p")
	if res, err := apply(ctx, 1, nEntries, items); err != nil || res.Skipped {
		t.Fatalf("apply after the kill: %+v, %v", res, err)
	}
	if res, err := apply(ctx, 1, nEntries, items); err != nil || !res.Skipped {
		t.Fatalf("replay: %+v, %v; want skipped", res, err)
	}
	var n, keys, perKey int64
	db.QueryRow(t, []any{&n, &keys, &perKey}, `SELECT count(*), count(DISTINCT id), max(c) FROM (SELECT id, count(*) OVER (PARTITION BY id) AS c FROM hist_kill.items_history) x`)
	if n != nEntries*perEntry || keys != perEntry || perKey != nEntries {
		t.Fatalf("history holds %d rows of %d keys, at most %d per key; want %d rows, %d keys, %d each", n, keys, perKey, nEntries*perEntry, perEntry, nEntries)
	}
	var dup int64
	db.QueryRow(t, []any{&dup}, `SELECT count(*) FROM (SELECT id, _skippr_position FROM hist_kill.items_history GROUP BY 1, 2 HAVING count(*) > 1) x`)
	if dup != 0 {
		t.Fatalf("%d (key, position) pairs appear twice in the history", dup)
	}
}

// TestHistorySchemaChangeInEntry: a column added inside an entry (the rows before it are written first, the
// entry's changes then go on in a second write): the history numbers the entry's changes on without a gap or
// a clash, and gains the column, NULL in the rows before it.
func TestHistorySchemaChangeInEntry(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	c := startPlugin(t)
	set := settings(db, map[string]any{"schema": "hist_ddl", "history": true})
	a := change.TimedSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "v", Type: arrow.BinaryTypes.String, Nullable: true}}, []string{"id"})
	b := change.TimedSchema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "v", Type: arrow.BinaryTypes.String, Nullable: true}, {Name: "w", Type: arrow.PrimitiveTypes.Int64, Nullable: true}}, []string{"id"})
	batch := func(sc *arrow.Schema, ids ...int64) client.ApplyItem {
		bl := change.NewBuilder(memory.DefaultAllocator, sc)
		defer bl.Release()
		for _, id := range ids {
			bl.Field(0).(*array.Int64Builder).Append(id)
			bl.Field(1).(*array.StringBuilder).Append(fmt.Sprint("v", id))
			if sc.NumFields() > 5 {
				bl.Field(2).(*array.Int64Builder).Append(id * 10)
			}
			bl.RowAt(change.OpInsert, "", time.Unix(id, 0))
		}
		rec := bl.NewBatch()
		defer rec.Release()
		ipc, err := protocol.EncodeRecord(memory.DefaultAllocator, rec)
		if err != nil {
			t.Fatal(err)
		}
		return client.ApplyItem{Batch: &protocol.Batch{Stream: "public.items", SchemaID: protocol.SchemaID(sc), Rows: rec.NumRows(), IPC: ipc}}
	}
	enc, err := protocol.EncodeSchema(memory.DefaultAllocator, b)
	if err != nil {
		t.Fatal(err)
	}
	items := []client.ApplyItem{
		batch(a, 1, 2),
		{Schema: &pluginv2.Stream{Name: "public.items", ArrowSchema: enc, PrimaryKey: []string{"id"}, SchemaId: protocol.SchemaID(b)}},
		batch(b, 3, 4),
	}
	if _, err := c.Apply(context.Background(), set, "p", 1, items); err != nil {
		t.Fatal(err)
	}
	var got []string
	rows, err := db.Connect(t).Query(context.Background(), `SELECT _skippr_seq, id, w FROM hist_ddl.items_history ORDER BY _skippr_position, _skippr_seq`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var seq, id int64
		var w *int64
		if err := rows.Scan(&seq, &id, &w); err != nil {
			t.Fatal(err)
		}
		ws := "NULL"
		if w != nil {
			ws = fmt.Sprint(*w)
		}
		got = append(got, fmt.Sprintf("%d:%d:%s", seq, id, ws))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if want := []string{"0:1:NULL", "1:2:NULL", "2:3:30", "3:4:40"}; !slices.Equal(got, want) {
		t.Fatalf("history (seq:id:w) %v, want %v", got, want)
	}
}
