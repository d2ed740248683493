package e2e

import (
	"bytes"
	"context"
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
	"github.com/skippr-dev/skippr/test/harness"
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

	e := harness.NewEnv(t)
	lake := filepath.Join(e.Dir, "lake")
	config := func(paused bool) {
		e.WriteConfig(fmt.Sprintf(`connections:
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
`, src.Server.Host, src.Server.Port, src.Name, lake, filepath.Join(e.Dir, "wal"), paused))
	}
	config(false)
	e.MustRun("sync", "--once") // the snapshot, applied: the lake holds 500 rows

	config(true)
	syncCtx, stopSync := context.WithCancel(ctx)
	defer stopSync()
	sync := e.Cmd(syncCtx, "sync")
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
	harness.WaitFor(t, 60*time.Second, func() bool {
		r := e.Run("query", "--json", queries[0])
		return r.Code == 0 && reflect.DeepEqual(harness.DecodeLines(t, r.Stdout), harness.PgJSON(t, ctx, pg, queries[0]))
	})
	t.Logf("the changes were visible in skippr query %s after the last statement", time.Since(start).Round(time.Millisecond))
	answers := map[string][]any{}
	for _, q := range queries {
		want := harness.PgJSON(t, ctx, pg, q)
		got := e.QueryJSON(q, false)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s\nskippr query (lake + WAL):\n%s\nsource Postgres:\n%s\nsync stderr:\n%s", q, harness.Show(got), harness.Show(want), syncErr.String())
		}
		answers[q] = got
	}
	if lakeOnly := e.QueryJSON(queries[1], true); reflect.DeepEqual(lakeOnly, answers[queries[1]]) {
		t.Fatalf("--as-of-lake answered like lake + WAL although apply is paused: %s", harness.Show(lakeOnly))
	}
	// Nested JSON from the source reads as JSON text; DuckDB's json functions reach inside.
	if nested := e.QueryJSON(`SELECT CAST(json_extract(doc, '$.nested.v') AS INTEGER) AS v FROM orders WHERE id = 12`, false); harness.Show(nested) != `[{"v":5}]` {
		t.Fatalf("nested doc of id 12: %s, want v = 5", harness.Show(nested))
	}

	// Bad SQL: DuckDB's message and exit status 2; an unknown table lists the known ones. The sync runs on.
	if r := e.Run("query", "SELEC 1"); r.Code != 2 || !strings.Contains(r.Stderr, "Parser Error") {
		t.Fatalf("bad SQL: exit %d, stderr %q; want 2 and DuckDB's parser error", r.Code, r.Stderr)
	}
	if r := e.Run("query", "SELECT * FROM shop.nope"); r.Code != 2 || !strings.Contains(r.Stderr, "known tables: shop.orders") {
		t.Fatalf("unknown table: exit %d, stderr %q; want 2 and the known tables", r.Code, r.Stderr)
	}
	// Other formats a script reads.
	if r := e.MustRun("query", "--format", "csv", "SELECT id, name FROM orders WHERE id IN (1, 2) ORDER BY id"); r.Stdout != "id,name\n1,n1\n2,n2\n" {
		t.Fatalf("csv: %q", r.Stdout)
	}
	if r := e.MustRun("query", "SELECT id, name FROM orders WHERE id = 1"); !strings.Contains(r.Stdout, "id   name\n---  ----\n1    n1\n") || !strings.Contains(r.Stderr, "(1 row, ") {
		t.Fatalf("table output %q, stderr %q", r.Stdout, r.Stderr)
	}

	// Without SQL and without a terminal, the statement comes from stdin.
	stdin := e.Cmd(ctx, "query", "--format", "csv")
	stdin.Stdin = strings.NewReader("SELECT count(*) AS n FROM orders WHERE id > 500;\n")
	if out, err := stdin.Output(); err != nil || string(out) != "n\n52\n" {
		t.Fatalf("SQL on stdin: %q %v, want 52 rows above id 500", out, err)
	}
	// The prompt: a statement over two lines, an error that does not end the session, history kept.
	repl(t, e, ctx, "SELECT count(*) AS n\nFROM orders WHERE id > 500;\nSELEC 1;\nSELECT 41 + 1 AS answer;\n.quit\n",
		"52", "Parser Error", "42")
	if h, err := os.ReadFile(filepath.Join(e.Home, "query_history")); err != nil || !strings.Contains(string(h), "SELECT 41 + 1 AS answer;") {
		t.Fatalf("query history: %q %v", h, err)
	}

	// A query never blocks the running sync: a change made now still reaches the WAL and the answer.
	exec(`UPDATE orders SET name = 'after queries' WHERE id = 1`)
	harness.WaitFor(t, 60*time.Second, func() bool {
		return harness.Show(e.QueryJSON(`SELECT name FROM orders WHERE id = 1`, false)) == `[{"name":"after queries"}]`
	})
	for _, q := range queries {
		answers[q] = harness.PgJSON(t, ctx, pg, q)
	}

	// Resume apply: the lake alone now answers the same as lake + WAL did, and as the source.
	sync.Process.Signal(syscall.SIGTERM)
	sync.Wait()
	config(false)
	e.MustRun("sync", "--once")
	for _, q := range queries {
		for _, asOfLake := range []bool{true, false} {
			if got := e.QueryJSON(q, asOfLake); !reflect.DeepEqual(got, answers[q]) {
				t.Fatalf("after apply (as of lake: %v): %s\ngot  %s\nwant %s", asOfLake, q, harness.Show(got), harness.Show(answers[q]))
			}
		}
	}
}

// repl types input into `skippr query` on a terminal and checks that the session printed each of want and
// ended by itself.
func repl(t *testing.T, e *harness.Env, ctx context.Context, input string, want ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := e.Cmd(ctx, "query")
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
