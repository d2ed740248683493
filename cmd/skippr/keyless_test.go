package main_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// A table without a primary key, keyed by its key_columns setting under REPLICA IDENTITY FULL: the snapshot,
// then inserts, updates (some moving a row to another key) and deletes arrive in a Postgres destination and an
// Iceberg lake, which equal the source row by row. Without REPLICA IDENTITY FULL, or with a key column that may
// hold NULL, the pipeline is refused at start.
func TestKeylessTableWithKeyColumns(t *testing.T) {
	src, dst := pgtest.NewDB(t), pgtest.NewDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	conn := func(db *pgtest.DB) *pgx.Conn {
		c, err := pgx.Connect(ctx, db.Server.ConnString(db.Name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(context.Background()) })
		return c
	}
	sc := conn(src)
	exec := func(sql string) {
		t.Helper()
		if _, err := sc.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(`CREATE TABLE events (device text NOT NULL, seq int NOT NULL, note text, doc jsonb, maybe int);
		INSERT INTO events SELECT 'd' || (i % 7), i, 'n' || i, jsonb_build_object('i', i), NULLIF(i % 3, 0) FROM generate_series(1, 500) i`)

	e := newEnv(t)
	s := src.Server
	lakeSettings := fmt.Sprintf(`{"catalog": {"warehouse": %q}, "namespace": "lake"}`, filepath.Join(e.dir, "lake"))
	config := func(keys string) {
		e.writeConfig(fmt.Sprintf(`connections:
  src:
    plugin: postgres
    version: "~> 0.1"
    settings:
      host: %[1]s
      port: %[2]d
      user: postgres
      database: %[3]s
      sslmode: disable
      tables: [public.events]
      slot: keyless
      publication: keyless
      table_options: { public.events: { key_columns: %[6]s } }
  dst:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: %[1]s, port: %[2]d, user: postgres, database: %[4]s, sslmode: disable }
  lake:
    plugin: iceberg
    version: "~> 0.1"
    settings: %[7]s
pipelines:
  events:
    source: src
    destinations: [dst, lake]
    wal:
      url: file://%[5]s
`, s.Host, s.Port, src.Name, dst.Name, filepath.Join(e.dir, "wal"), keys, lakeSettings))
	}
	refused := func(want ...string) {
		t.Helper()
		r := e.run("sync", "--once")
		if r.code != 2 {
			t.Fatalf("sync --once: exit %d, want 2\n%s", r.code, r.stderr)
		}
		for _, w := range want {
			if !strings.Contains(r.stderr, w) {
				t.Fatalf("sync --once stderr lacks %q:\n%s", w, r.stderr)
			}
		}
	}

	config("[device, seq]")
	refused("keyed on key_columns (device, seq)", `ALTER TABLE "public"."events" REPLICA IDENTITY FULL`)
	exec(`ALTER TABLE events REPLICA IDENTITY FULL`)
	config("[device, maybe]")
	refused("column maybe of table public.events is a key column (key_columns) but may hold NULL", "SET NOT NULL")
	config("[device, seq]")
	e.mustRun("sync", "--once")

	exec(`INSERT INTO events SELECT 'd' || (i % 7), i, 'n' || i, NULL, i FROM generate_series(501, 600) i;
		UPDATE events SET note = 'changed', doc = '{"x": [1, 2]}' WHERE seq % 10 = 0;
		UPDATE events SET seq = seq + 10000 WHERE seq % 25 = 1;
		DELETE FROM events WHERE seq % 13 = 0`)
	e.mustRun("sync", "--once")

	dump := func(c *pgx.Conn) []string {
		rows, err := c.Query(ctx, `SELECT device || '|' || seq || '|' || coalesce(note, '') || '|' || coalesce(doc::text, '') || '|' || coalesce(maybe::text, '') FROM events`)
		if err != nil {
			t.Fatal(err)
		}
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(out)
		return out
	}
	want, got := dump(sc), dump(conn(dst))
	if len(want) != len(got) {
		t.Fatalf("source has %d rows, destination %d", len(want), len(got))
	}
	for i := range want {
		if want[i] != got[i] {
			t.Fatalf("row %d differs:\nsource      %s\ndestination %s", i, want[i], got[i])
		}
	}
	// The lake: equality deletes on the key columns removed the deleted rows and the old keys of moved rows.
	lake := pluginRows(t, "iceberg", "scan", lakeSettings, "public.events", "the lake table", func(_ []byte, row map[string]any) string {
		return fmt.Sprintf("%v|%v", row["device"], row["seq"])
	})
	var lakeRows []string
	for _, row := range lake {
		doc, maybe := "", ""
		if row["doc"] != nil {
			doc = fmt.Sprint(row["doc"])
		}
		if row["maybe"] != nil {
			maybe = fmt.Sprint(row["maybe"])
		}
		lakeRows = append(lakeRows, fmt.Sprintf("%v|%v|%v|%s|%s", row["device"], row["seq"], row["note"], doc, maybe))
	}
	slices.Sort(lakeRows)
	if !slices.Equal(want, lakeRows) {
		t.Fatalf("the lake differs from the source: %d rows, source %d; first lake rows %v", len(lakeRows), len(want), lakeRows[:min(3, len(lakeRows))])
	}
	t.Logf("%d rows equal in source, Postgres destination and lake", len(want))
}
