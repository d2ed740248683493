package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skippr-dev/skippr/test/harness"
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

	e := harness.NewEnv(t)
	config := func(keys string) {
		writeKeylessConfig(e, src, dst, "events", "keyless", "\n      table_options: { public.events: { key_columns: "+keys+" } }")
	}
	refused := func(want ...string) {
		t.Helper()
		r := e.Run("sync", "--once")
		if r.Code != 2 {
			t.Fatalf("sync --once: exit %d, want 2\n%s", r.Code, r.Stderr)
		}
		for _, w := range want {
			if !strings.Contains(r.Stderr, w) {
				t.Fatalf("sync --once stderr lacks %q:\n%s", w, r.Stderr)
			}
		}
	}

	config("[device, seq]")
	refused("keyed on key_columns (device, seq)", `ALTER TABLE "public"."events" REPLICA IDENTITY FULL`)
	exec(`ALTER TABLE events REPLICA IDENTITY FULL`)
	config("[device, maybe]")
	refused("column maybe of table public.events is a key column (key_columns) but may hold NULL", "SET NOT NULL")
	config("[device, seq]")
	e.MustRun("sync", "--once")

	exec(`INSERT INTO events SELECT 'd' || (i % 7), i, 'n' || i, NULL, i FROM generate_series(501, 600) i;
		UPDATE events SET note = 'changed', doc = '{"x": [1, 2]}' WHERE seq % 10 = 0;
		UPDATE events SET seq = seq + 10000 WHERE seq % 25 = 1;
		DELETE FROM events WHERE seq % 13 = 0`)
	e.MustRun("sync", "--once")

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
	lake := harness.PluginRows(t, "iceberg", "scan", harness.KeylessLakeSettings(e), "public.events", "the lake table", func(_ []byte, row map[string]any) string {
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

// A table without a key or REPLICA IDENTITY FULL is refused at start, the message naming mode: append and
// key_columns. In mode: append its inserts arrive — snapshot and stream, in a Postgres destination and an
// Iceberg lake — and its updates and deletes are not carried, as plugins/postgres/README.md states: the
// destinations keep every row as it was inserted. The source's own UPDATE and DELETE keep working (the table
// is in the inserts-only append publication; in one that publishes updates, PostgreSQL would refuse them).
func TestKeylessTableInAppendMode(t *testing.T) {
	src, dst := pgtest.NewDB(t), pgtest.NewDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	sc, dc := src.Connect(t), dst.Connect(t)
	exec := func(sql string) {
		t.Helper()
		if _, err := sc.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(`CREATE TABLE readings (device text, reading int, note text);
		INSERT INTO readings SELECT 'd' || (i % 5), i, 'n' || i FROM generate_series(1, 300) i;
		INSERT INTO readings VALUES ('d1', 1, 'n1'), (NULL, NULL, NULL)`) // a duplicate row and an all-NULL one

	e := harness.NewEnvWith(t, "postgres", "iceberg")
	config := func(options string) { writeKeylessConfig(e, src, dst, "readings", "appendonly", options) }
	config("")
	r := e.Run("sync", "--once")
	if r.Code != 2 {
		t.Fatalf("sync --once of a keyless table without mode: append: exit %d, want 2\n%s", r.Code, r.Stderr)
	}
	for _, w := range []string{"table public.readings has no primary key", "key_columns", "mode: append"} {
		if !strings.Contains(r.Stderr, w) {
			t.Fatalf("the refusal lacks %q:\n%s", w, r.Stderr)
		}
	}

	config("\n      table_options: { public.readings: { mode: append } }")
	e.MustRun("sync", "--once")

	// The source's own writes: inserts, and updates and deletes, which PostgreSQL must accept.
	exec(`INSERT INTO readings SELECT 'd' || (i % 5), i, 'n' || i FROM generate_series(301, 400) i`)
	exec(`UPDATE readings SET note = 'changed' WHERE reading % 10 = 0`)
	exec(`DELETE FROM readings WHERE reading % 7 = 0`)
	exec(`INSERT INTO readings VALUES ('late', 1000, 'after the update and delete')`)
	e.MustRun("sync", "--once")

	// What the README says arrives: every row as inserted (duplicates kept), updates and deletes not carried.
	var want []string
	for i := 1; i <= 400; i++ {
		want = append(want, fmt.Sprintf("d%d|%d|n%d", i%5, i, i))
	}
	want = append(want, "d1|1|n1", "||", "late|1000|after the update and delete")
	slices.Sort(want)
	rows, err := dc.Query(ctx, `SELECT coalesce(device, '') || '|' || coalesce(reading::text, '') || '|' || coalesce(note, '') FROM readings`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("Postgres destination: %d rows, want %d (every insert, no update or delete); rows it lacks %v; rows it should not have %v", len(got), len(want), harness.Missing(want, got), harness.Missing(got, want))
	}
	// The lake, with no key to tell rows apart, keyed here by position in the sorted list.
	var lakeRows []string
	n := 0
	for _, row := range harness.PluginRows(t, "iceberg", "scan", harness.KeylessLakeSettings(e), "public.readings", "the lake table", func([]byte, map[string]any) string {
		n++
		return fmt.Sprint(n)
	}) {
		str := func(k string) string {
			if row[k] == nil {
				return ""
			}
			return fmt.Sprint(row[k])
		}
		lakeRows = append(lakeRows, str("device")+"|"+str("reading")+"|"+str("note"))
	}
	slices.Sort(lakeRows)
	if !slices.Equal(lakeRows, want) {
		t.Fatalf("lake: %d rows, want %d (every insert, no update or delete); rows it lacks %v; rows it should not have %v", len(lakeRows), len(want), harness.Missing(want, lakeRows), harness.Missing(lakeRows, want))
	}
	var pubUpdate, pubInsert bool
	if err := sc.QueryRow(ctx, `SELECT pubinsert, pubupdate FROM pg_publication WHERE pubname = 'appendonly_append'`).Scan(&pubInsert, &pubUpdate); err != nil {
		t.Fatalf("the append publication: %v", err)
	}
	if !pubInsert || pubUpdate {
		t.Fatalf("the append publication publishes insert %v, update %v; want inserts only", pubInsert, pubUpdate)
	}
	t.Logf("%d rows in the Postgres destination and the lake: every insert, updates and deletes not carried", len(want))
}

// writeKeylessConfig writes the config of a pipeline named for table: src's public.<table> (slot and publication
// name, then the extra source settings lines) into the Postgres database dst and an Iceberg lake in e.dir.
func writeKeylessConfig(e *harness.Env, src, dst *pgtest.DB, table, name, extra string) {
	s := src.Server
	e.WriteConfig(fmt.Sprintf(`connections:
  src:
    plugin: postgres
    version: "~> 0.1"
    settings:
      host: %[1]s
      port: %[2]d
      user: postgres
      database: %[3]s
      sslmode: disable
      tables: [public.%[8]s]
      slot: %[9]s
      publication: %[9]s%[6]s
  dst:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: %[1]s, port: %[2]d, user: postgres, database: %[4]s, sslmode: disable }
  lake:
    plugin: iceberg
    version: "~> 0.1"
    settings: %[7]s
pipelines:
  %[8]s:
    source: src
    destinations: [dst, lake]
    wal:
      url: file://%[5]s
`, s.Host, s.Port, src.Name, dst.Name, filepath.Join(e.Dir, "wal"), extra, harness.KeylessLakeSettings(e), table, name))
}
