package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/jackc/pgx/v5"

	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// TestQueryLakePlusWAL runs Postgres → Iceberg with apply paused: rows inserted, updated and deleted in
// Postgres (and a column added) show up in `skippr query` while they are only in the WAL, the answer equals
// the same SQL on the source Postgres, the lake alone (--as-of-lake) does not have them, and after apply
// resumes the lake alone gives the same answer.
func TestQueryLakePlusWAL(t *testing.T) {
	src := pgtest.NewDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	pg := src.Connect(t)
	exec := func(q string) {
		t.Helper()
		if _, err := pg.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(`CREATE TABLE orders (id bigint PRIMARY KEY, name text NOT NULL, amount numeric(12,2), tags text[], doc jsonb)`)
	exec(`INSERT INTO orders SELECT i, 'n' || i, i * 1.25, ARRAY['t' || (i % 3), 'u'], jsonb_build_object('k', i, 'nested', jsonb_build_object('v', i % 7)) FROM generate_series(1, 500) i`)

	e := newEnv(t)
	lake := filepath.Join(e.dir, "lake")
	config := func(paused bool) {
		e.writeConfig(fmt.Sprintf(`connections:
  src:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: %[1]s, port: %[2]d, user: postgres, database: %[3]s, sslmode: disable, tables: [public.orders], slot: q, publication: q }
  lake:
    plugin: iceberg
    version: "~> 0.1"
    settings: { catalog: { warehouse: %[4]s }, namespace: shop, tables: { public.orders: orders } }
pipelines:
  orders:
    source: src
    destinations: [lake]
    apply: { paused: %[6]v }
    wal:
      url: file://%[5]s
      group_commit: { max_bytes: 1MiB, max_delay: 50ms }
`, src.Server.Host, src.Server.Port, src.Name, lake, filepath.Join(e.dir, "wal"), paused))
	}
	config(false)
	e.mustRun("sync", "--once") // the snapshot, applied: the lake holds 500 rows

	config(true)
	syncCtx, stopSync := context.WithCancel(ctx)
	defer stopSync()
	sync := e.cmd(syncCtx, "sync")
	var syncErr bytes.Buffer
	sync.Stderr = &syncErr
	if err := sync.Start(); err != nil {
		t.Fatal(err)
	}
	exec(`INSERT INTO orders SELECT i, 'new' || i, i * 0.5, ARRAY['w'], '{"fresh": true}' FROM generate_series(501, 560) i`)
	exec(`UPDATE orders SET name = name || '+', amount = amount + 100 WHERE id % 10 = 0`)
	exec(`DELETE FROM orders WHERE id % 7 = 0`)
	exec(`ALTER TABLE orders ADD COLUMN note text`)
	exec(`UPDATE orders SET note = 'noted ' || id WHERE id IN (3, 503)`)
	exec(`INSERT INTO orders (id, name, note) VALUES (1000, 'late', 'after the column')`)

	queries := []string{
		`SELECT id, name, amount, tags[1] AS first_tag, note FROM orders ORDER BY id`,
		`SELECT count(*) AS n, sum(amount) AS total, string_agg(name, ',' ORDER BY id) AS names FROM orders`,
		`SELECT id, note FROM orders WHERE note IS NOT NULL ORDER BY id`,
		`SELECT tags[2] AS t, count(*) AS n FROM orders GROUP BY tags[2] ORDER BY t NULLS FIRST`,
	}
	// Rows are visible once their WAL commit record exists: poll until the slot delivered the last change.
	// Until the added column's first row arrives, the SQL fails on the unknown column.
	start := time.Now()
	waitFor(t, 60*time.Second, func() bool {
		r := e.run("query", "--json", queries[0])
		return r.code == 0 && reflect.DeepEqual(decodeLines(t, r.stdout), pgJSON(t, ctx, pg, queries[0]))
	})
	t.Logf("the changes were visible in skippr query %s after the last statement", time.Since(start).Round(time.Millisecond))
	answers := map[string][]any{}
	for _, q := range queries {
		want := pgJSON(t, ctx, pg, q)
		got := e.queryJSON(q, false)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s\nskippr query (lake + WAL):\n%s\nsource Postgres:\n%s\nsync stderr:\n%s", q, show(got), show(want), syncErr.String())
		}
		answers[q] = got
	}
	if lakeOnly := e.queryJSON(queries[1], true); reflect.DeepEqual(lakeOnly, answers[queries[1]]) {
		t.Fatalf("--as-of-lake answered like lake + WAL although apply is paused: %s", show(lakeOnly))
	}
	// Nested JSON from the source reads as JSON text; DuckDB's json functions reach inside.
	if nested := e.queryJSON(`SELECT CAST(json_extract(doc, '$.nested.v') AS INTEGER) AS v FROM orders WHERE id = 12`, false); show(nested) != `[{"v":5}]` {
		t.Fatalf("nested doc of id 12: %s, want v = 5", show(nested))
	}

	// Bad SQL: DuckDB's message and exit status 2; an unknown table lists the known ones. The sync runs on.
	if r := e.run("query", "SELEC 1"); r.code != 2 || !strings.Contains(r.stderr, "Parser Error") {
		t.Fatalf("bad SQL: exit %d, stderr %q; want 2 and DuckDB's parser error", r.code, r.stderr)
	}
	if r := e.run("query", "SELECT * FROM shop.nope"); r.code != 2 || !strings.Contains(r.stderr, "known tables: shop.orders") {
		t.Fatalf("unknown table: exit %d, stderr %q; want 2 and the known tables", r.code, r.stderr)
	}
	// Other formats a script reads.
	if r := e.mustRun("query", "--format", "csv", "SELECT id, name FROM orders WHERE id IN (1, 2) ORDER BY id"); r.stdout != "id,name\n1,n1\n2,n2\n" {
		t.Fatalf("csv: %q", r.stdout)
	}
	if r := e.mustRun("query", "SELECT id, name FROM orders WHERE id = 1"); !strings.Contains(r.stdout, "id   name\n---  ----\n1    n1\n") || !strings.Contains(r.stderr, "(1 row, ") {
		t.Fatalf("table output %q, stderr %q", r.stdout, r.stderr)
	}

	// Without SQL and without a terminal, the statement comes from stdin.
	stdin := e.cmd(ctx, "query", "--format", "csv")
	stdin.Stdin = strings.NewReader("SELECT count(*) AS n FROM orders WHERE id > 500;\n")
	if out, err := stdin.Output(); err != nil || string(out) != "n\n52\n" {
		t.Fatalf("SQL on stdin: %q %v, want 52 rows above id 500", out, err)
	}
	// The prompt: a statement over two lines, an error that does not end the session, history kept.
	repl(t, e, ctx, "SELECT count(*) AS n\nFROM orders WHERE id > 500;\nSELEC 1;\nSELECT 41 + 1 AS answer;\n.quit\n",
		"52", "Parser Error", "42")
	if h, err := os.ReadFile(filepath.Join(e.home, "query_history")); err != nil || !strings.Contains(string(h), "SELECT 41 + 1 AS answer;") {
		t.Fatalf("query history: %q %v", h, err)
	}

	// A query never blocks the running sync: a change made now still reaches the WAL and the answer.
	exec(`UPDATE orders SET name = 'after queries' WHERE id = 1`)
	waitFor(t, 60*time.Second, func() bool {
		return show(e.queryJSON(`SELECT name FROM orders WHERE id = 1`, false)) == `[{"name":"after queries"}]`
	})
	for _, q := range queries {
		answers[q] = pgJSON(t, ctx, pg, q)
	}

	// Resume apply: the lake alone now answers the same as lake + WAL did, and as the source.
	sync.Process.Signal(syscall.SIGTERM)
	sync.Wait()
	config(false)
	e.mustRun("sync", "--once")
	for _, q := range queries {
		for _, asOfLake := range []bool{true, false} {
			if got := e.queryJSON(q, asOfLake); !reflect.DeepEqual(got, answers[q]) {
				t.Fatalf("after apply (as of lake: %v): %s\ngot  %s\nwant %s", asOfLake, q, show(got), show(answers[q]))
			}
		}
	}
}

// repl types input into `skippr query` on a terminal and checks that the session printed each of want and
// ended by itself.
func repl(t *testing.T, e *env, ctx context.Context, input string, want ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := e.cmd(ctx, "query")
	tty, err := pty.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	if _, err := tty.Write([]byte(input)); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	io.Copy(&out, tty) // ends with EIO once the session exits and closes the terminal
	if err := cmd.Wait(); err != nil {
		t.Fatalf("query prompt: %v\n%s", err, out.String())
	}
	for _, w := range want {
		if !strings.Contains(out.String(), w) {
			t.Fatalf("query prompt: %q missing from\n%s", w, out.String())
		}
	}
}

// queryJSON runs `skippr query --json` and decodes its lines.
func (e *env) queryJSON(sql string, asOfLake bool) []any {
	e.t.Helper()
	args := []string{"query", "--json", sql}
	if asOfLake {
		args = []string{"query", "--json", "--as-of-lake", sql}
	}
	r := e.mustRun(args...)
	return decodeLines(e.t, r.stdout)
}

// pgJSON runs sql on Postgres and returns its rows as JSON objects, as DuckDB's JSON output has them.
func pgJSON(t *testing.T, ctx context.Context, pg *pgx.Conn, sql string) []any {
	t.Helper()
	rows, err := pg.Query(ctx, fmt.Sprintf(`SELECT row_to_json(q)::text FROM (%s) q`, sql))
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return decodeLines(t, strings.Join(lines, "\n"))
}

// decodeLines decodes JSON lines; numbers become float64, so 1.50 and 1.5 compare equal.
func decodeLines(t *testing.T, s string) []any {
	t.Helper()
	out := []any{}
	dec := json.NewDecoder(strings.NewReader(s))
	for dec.More() {
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("decode %q: %v", s, err)
		}
		out = append(out, v)
	}
	return out
}

func show(v []any) string {
	b, _ := json.Marshal(v)
	if len(b) > 2000 {
		return string(b[:2000]) + "…"
	}
	return string(b)
}

// TestPostgresToIcebergSurvivesSIGKILL runs Postgres → Iceberg while a writer changes the source, SIGKILLs the
// engine during the snapshot and during streaming, then compares the lake (alone, --as-of-lake) with the source
// row by row through the same SQL, and checks that no key is held twice.
func TestPostgresToIcebergSurvivesSIGKILL(t *testing.T) {
	src := pgtest.NewDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	pg := src.Connect(t)
	createOrders(t, ctx, pg, 40000)
	e := newEnv(t)
	e.writeConfig(fmt.Sprintf(`connections:
  src:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: %[1]s, port: %[2]d, user: postgres, database: %[3]s, sslmode: disable, tables: [public.orders], slot: ice, publication: ice, batch_size: 2000 }
  lake:
    plugin: iceberg
    version: "~> 0.1"
    settings: { catalog: { warehouse: %[4]s }, namespace: lake, tables: { public.orders: orders } }
pipelines:
  orders:
    source: src
    destinations: [lake]
    wal:
      url: file://%[5]s
      group_commit: { max_bytes: 256KiB, max_delay: 50ms }
`, src.Server.Host, src.Server.Port, src.Name, filepath.Join(e.dir, "lake"), filepath.Join(e.dir, "wal")))
	stopWriter := startOrdersWriter(t, ctx, src.Connect(t), 40001)
	kills := 8
	e.killSyncAtRandom(kills, 500*time.Millisecond, 3*time.Second)
	stopWriter()
	e.mustRun("sync", "--once")

	// Timestamps compare as microseconds since the epoch: the two print them differently.
	got := e.queryJSON(`SELECT id, name, amount, tags, doc::json->>'u' AS u, doc::json->>'new' AS fresh, epoch_us("at") AS at FROM orders ORDER BY id`, true)
	want := pgJSON(t, ctx, pg, `SELECT id, name, amount, tags, doc->>'u' AS u, doc->>'new' AS fresh, (extract(epoch FROM at) * 1000000)::bigint AS at FROM orders ORDER BY id`)
	if len(got) != len(want) {
		t.Fatalf("the lake has %d rows, the source %d", len(got), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Fatalf("row %d differs:\nlake   %s\nsource %s", i, show(got[i:i+1]), show(want[i:i+1]))
		}
	}
	if dup := e.queryJSON(`SELECT id, count(*) AS n FROM orders GROUP BY id HAVING count(*) > 1`, true); len(dup) != 0 {
		t.Fatalf("keys held twice in the lake: %s", show(dup))
	}
	t.Logf("%d SIGKILLs during snapshot and streaming; the lake's %d rows equal the source's", kills, len(got))
}
