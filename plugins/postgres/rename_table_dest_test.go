package main

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skippr-dev/skippr/plugin-sdk/conformance"
	"github.com/skippr-dev/skippr/plugins/postgres/dest"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// TestDestRenamedStream: a stream the source renamed (change.RenamedFromTableMeta) is carried by renaming the
// table, and its history table with it (conformance.CheckRenamedStream: rows before the rename stay, changes
// after it land beside them, a replay changes nothing). Without the rename the new stream's table starts empty
// and the old one keeps the rows written before.
func TestDestRenamedStream(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	conn, err := pgx.Connect(context.Background(), db.ConnString())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	rows := func(stream string) (map[string]map[string]string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		name := pgx.Identifier{"out", dest.TableName(stream)}.Sanitize()
		var exists bool
		if err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&exists); err != nil || !exists {
			return map[string]map[string]string{}, err
		}
		rs, err := conn.Query(ctx, `SELECT id::text, coalesce(name, '') FROM `+name)
		if err != nil {
			return nil, err
		}
		out := map[string]map[string]string{}
		for rs.Next() {
			var id, v string
			if err := rs.Scan(&id, &v); err != nil {
				rs.Close()
				return nil, err
			}
			out[id] = map[string]string{"name": v}
		}
		return out, rs.Err()
	}
	conformance.CheckRenamedStream(t, conformance.Config{Binary: pluginBin, Settings: settings(db, map[string]any{"schema": "out", "history": true}), Rows: rows})

	// The history tables went along: one for the last name, none for the former ones, and it holds the changes
	// written under every name (3 inserts, an update; an insert, a delete; the insert and delete again under a
	// new sequence number; an update, an insert).
	var tables []string
	rs, err := conn.Query(context.Background(), `SELECT tablename FROM pg_tables WHERE schemaname = 'out' AND tablename LIKE 'ren\_%' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	for rs.Next() {
		var n string
		if err := rs.Scan(&n); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, n)
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	if len(tables) != 2 {
		t.Fatalf("tables after the renames: %v, want the last name's table and its history", tables)
	}
	var n int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM `+pgx.Identifier{"out", tables[1]}.Sanitize()).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 10 || tables[1] != tables[0]+"_history" {
		t.Errorf("history table %s holds %d changes, want 10 (of table %s)", tables[1], n, tables[0])
	}
}
