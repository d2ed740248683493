package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/internal/testplugins"
	"github.com/skippr-dev/skippr/plugin-sdk/conformance/filedest"
	"github.com/skippr-dev/skippr/test/harness"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// TestMySQLRenameTableFollowed: while a writer changes shop.orders, the source renames it to orders_v2 (RENAME
// TABLE, the new name matched by the pattern orders*), the writer goes on under the new name, and `skippr sync` is
// SIGKILLed at random before and right after the rename, so ranges holding it are applied again after a restart.
// Afterwards Postgres, DuckDB and an Iceberg lake hold every row of orders_v2 in their table of that name, the rows
// written before the rename included, and no table of the old name. Without the rename marker the new table holds only the rows changed after the
// rename, and the old one the rest.
func TestMySQLRenameTableFollowed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	m := harness.NewMySQLChaos(t, ctx, "bigint")
	e := m.E
	pg := pgtest.NewDB(t)
	duck := fmt.Sprintf(`{"path": %q}`, filepath.Join(e.Dir, "dest", "orders.duckdb"))
	e.WriteConfig(fmt.Sprintf(`connections:
  src:
    plugin: mysql
    version: "~> 0.1"
    settings: { host: %[1]s, port: %[2]d, user: root, database: shop, tables: [items, "orders*"], batch_size: 2000 }
  pg:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: %[3]s, port: %[4]d, user: postgres, database: %[5]s, sslmode: disable }
  duck:
    plugin: duckdb
    version: "~> 0.1"
    settings: %[6]s
  lake:
    plugin: iceberg
    version: "~> 0.1"
    settings: { catalog: { warehouse: %[8]s } }
pipelines:
  orders:
    source: src
    destinations: [pg, duck, lake]
    wal:
      url: file://%[7]s
      group_commit: { max_bytes: 64KiB, max_delay: 50ms }
`, m.Srv.Host, m.Srv.Port, pg.Server.Host, pg.Server.Port, pg.Name, duck, filepath.Join(e.Dir, "wal"), filepath.Join(e.Dir, "lake")))
	e.MustRun("sync", "--once")

	load := startTableLoad(t, ctx, func(ctx context.Context, q string) error { _, err := m.Src.ExecContext(ctx, q); return err }, "shop.orders")
	e.KillSyncAtRandom(2, 500*time.Millisecond, 2000*time.Millisecond)
	load.rename("RENAME TABLE shop.orders TO shop.orders_v2", "shop.orders_v2")
	e.KillSyncAtRandom(3, 200*time.Millisecond, 2500*time.Millisecond)
	statements := load.stop()
	e.MustRun("sync", "--once")
	t.Logf("%d statements of load, 5 SIGKILLs", statements)

	want := m.Rows("SELECT id, concat(name, '|', coalesce(amount, ''), '|', coalesce(n, '')) FROM shop.orders_v2")
	sameAfterTableRename(t, ctx, want, pg, "orders", "orders_v2", duck, "shop.orders", "shop.orders_v2")
	sameLakeAfterTableRename(t, e, want, "shop.orders", "shop.orders_v2")
}

// TestPostgresRenameTableFollowed is TestMySQLRenameTableFollowed for a PostgreSQL 15 source: ALTER TABLE … RENAME
// TO orders_v2, matched by the pattern public.orders*, is read from pgoutput's Relation message (the table's oid
// under a new name). Without the detection the renamed table's changes are not carried at all. An Iceberg lake
// follows too (catalog RenameTable): read through `skippr query --as-of-lake`, the old name is gone there as well.
func TestPostgresRenameTableFollowed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	src, pg := pgtest.NewDB(t), pgtest.NewDB(t)
	sc := pgConn(t, ctx, src)
	if _, err := sc.Exec(ctx, `CREATE TABLE orders (id bigint PRIMARY KEY, name text NOT NULL, amount numeric(12,2), n bigint);
		INSERT INTO orders SELECT i, 'n' || i, i * 1.25, i * 1000 FROM generate_series(1, 60000) i`); err != nil {
		t.Fatal(err)
	}
	e := harness.NewEnvWith(t, "postgres", "duckdb", "iceberg")
	duck := fmt.Sprintf(`{"path": %q}`, filepath.Join(e.Dir, "dest", "orders.duckdb"))
	s := src.Server
	e.WriteConfig(fmt.Sprintf(`connections:
  src:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: %[1]s, port: %[2]d, user: postgres, database: %[3]s, sslmode: disable, tables: ["public.orders*"], slot: renames, publication: renames, batch_size: 2000 }
  pg:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: %[1]s, port: %[2]d, user: postgres, database: %[4]s, sslmode: disable }
  duck:
    plugin: duckdb
    version: "~> 0.1"
    settings: %[5]s
  lake:
    plugin: iceberg
    version: "~> 0.1"
    settings: { catalog: { warehouse: %[7]s } }
pipelines:
  orders:
    source: src
    destinations: [pg, duck, lake]
    wal:
      url: file://%[6]s
      group_commit: { max_bytes: 64KiB, max_delay: 50ms }
`, s.Host, s.Port, src.Name, pg.Name, duck, filepath.Join(e.Dir, "wal"), filepath.Join(e.Dir, "lake")))
	e.MustRun("sync", "--once")

	wc := pgConn(t, ctx, src)
	load := startTableLoad(t, ctx, func(ctx context.Context, q string) error { _, err := wc.Exec(ctx, q); return err }, "orders")
	e.KillSyncAtRandom(2, 500*time.Millisecond, 2000*time.Millisecond)
	load.rename("ALTER TABLE orders RENAME TO orders_v2", "orders_v2")
	e.KillSyncAtRandom(3, 200*time.Millisecond, 2500*time.Millisecond)
	statements := load.stop()
	e.MustRun("sync", "--once")
	t.Logf("%d statements of load, 5 SIGKILLs", statements)

	rows, err := sc.Query(ctx, `SELECT id::text, concat(name, '|', coalesce(amount::text, ''), '|', coalesce(n::text, '')) FROM orders_v2`)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for rows.Next() {
		var id, v string
		if err := rows.Scan(&id, &v); err != nil {
			t.Fatal(err)
		}
		want[id] = v
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	sameAfterTableRename(t, ctx, want, pg, "orders", "orders_v2", duck, "public.orders", "public.orders_v2")
	sameLakeAfterTableRename(t, e, want, "public.orders", "public.orders_v2")
}

// sameLakeAfterTableRename compares want (as sameAfterTableRename left it: id → "name|amount|n") with the Iceberg
// lake's table of stream newStream, read through `skippr query --as-of-lake`, and checks the lake has no table of
// stream oldStream.
func sameLakeAfterTableRename(t *testing.T, e *harness.Env, want map[string]string, oldStream, newStream string) {
	t.Run("iceberg", func(t *testing.T) {
		got := map[string]string{}
		for _, r := range e.QueryJSON(fmt.Sprintf(`SELECT id::VARCHAR AS id, concat(name, '|', coalesce(amount::VARCHAR, ''), '|', coalesce(n::VARCHAR, '')) AS v FROM skippr.%q`, newStream), true) {
			m := r.(map[string]any)
			got[m["id"].(string)] = m["v"].(string)
		}
		harness.SameTable(t, want, got)
		if r := e.Run("query", "--as-of-lake", fmt.Sprintf("SELECT count(*) FROM skippr.%q", oldStream)); r.Code == 0 {
			t.Errorf("the lake still has table %s: %s", oldStream, r.Stdout)
		}
	})
}

// sameAfterTableRename compares the source's rows (id → "name|amount|n") with the Postgres table newTable and the
// DuckDB stream newStream, and checks that neither keeps a table of the old name.
func sameAfterTableRename(t *testing.T, ctx context.Context, want map[string]string, pg *pgtest.DB, oldTable, newTable, duck, oldStream, newStream string) {
	t.Helper()
	row := func(name, amount, n any) string {
		a := ""
		if amount != nil {
			f, err := strconv.ParseFloat(fmt.Sprint(amount), 64)
			if err != nil {
				t.Fatalf("amount %v: %v", amount, err)
			}
			a = strconv.FormatFloat(f, 'f', 2, 64)
		}
		s := ""
		if n != nil {
			s = fmt.Sprint(n)
		}
		return fmt.Sprintf("%v|%s|%s", name, a, s)
	}
	for id, v := range want { // the source's text through the same formatting
		p := strings.Split(v, "|")
		var a, n any
		if p[1] != "" {
			a = p[1]
		}
		if p[2] != "" {
			n = p[2]
		}
		want[id] = row(p[0], a, n)
	}
	c := pgConn(t, ctx, pg)
	var old bool
	if err := c.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, "public."+oldTable).Scan(&old); err != nil {
		t.Fatal(err)
	}
	if old {
		t.Errorf("postgres still has table %s", oldTable)
	}
	rows, err := c.Query(ctx, `SELECT id::text, name, amount::text, n FROM public.`+newTable)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for rows.Next() {
		var (
			id, name string
			amount   *string
			n        *int64
		)
		if err := rows.Scan(&id, &name, &amount, &n); err != nil {
			t.Fatal(err)
		}
		var a, nn any
		if amount != nil {
			a = *amount
		}
		if n != nil {
			nn = *n
		}
		got[id] = row(name, a, nn)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	t.Run("postgres", func(t *testing.T) { harness.SameTable(t, want, got) })
	t.Run("duckdb", func(t *testing.T) {
		got := map[string]string{}
		for id, r := range harness.DumpDuckDB(t, duck, newStream) {
			got[id] = row(r["name"], r["amount"], r["n"])
		}
		harness.SameTable(t, want, got)
		cmd := exec.Command(testplugins.Build(t, "duckdb"), "dump", oldStream)
		cmd.Stdin = strings.NewReader(duck)
		if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "has no table") {
			t.Errorf("duckdb dump %s (the old name): %v, %s; want no such table", oldStream, err, out)
		}
	})
	t.Logf("%d rows equal in the source, Postgres and DuckDB after the rename", len(want))
}

// tableLoad changes a table (inserts, updates, deletes) in small statements until stopped, and renames it between
// two of its statements, going on under the new name.
type tableLoad struct {
	t       *testing.T
	mu      sync.Mutex
	renames chan [2]string
	errs    chan error
	done    chan struct{}
	count   int
	quit    context.CancelFunc
}

func startTableLoad(t *testing.T, ctx context.Context, exec func(context.Context, string) error, table string) *tableLoad {
	ctx, cancel := context.WithCancel(ctx)
	l := &tableLoad{t: t, renames: make(chan [2]string), errs: make(chan error), done: make(chan struct{}), quit: cancel}
	go func() {
		defer close(l.done)
		rng := rand.New(rand.NewPCG(5, 6))
		next := int64(700_000)
		for ctx.Err() == nil {
			select {
			case r := <-l.renames:
				err := exec(ctx, r[0])
				if err == nil {
					table = r[1]
				}
				l.errs <- err
				continue
			default:
			}
			id := 1 + rng.Int64N(60_000)
			var q string
			switch rng.IntN(4) {
			case 0:
				q = fmt.Sprintf("INSERT INTO %s (id, name, amount, n) VALUES (%d, 'new', 2.5, 7)", table, next)
				next++
			case 1:
				q = fmt.Sprintf("UPDATE %s SET amount = amount + 1 WHERE id = %d", table, id)
			case 2:
				q = fmt.Sprintf("UPDATE %s SET n = n + 1, name = concat(name, '+') WHERE id = %d", table, id)
			default:
				q = fmt.Sprintf("DELETE FROM %s WHERE id = %d", table, id)
			}
			if err := exec(ctx, q); err != nil {
				if ctx.Err() == nil {
					t.Errorf("load: %s: %v", q, err)
				}
				return
			}
			l.mu.Lock()
			l.count++
			l.mu.Unlock()
			time.Sleep(2 * time.Millisecond)
		}
	}()
	return l
}

// rename runs the rename statement q between two of the load's statements, which go on under table.
func (l *tableLoad) rename(q, table string) {
	l.t.Helper()
	select {
	case l.renames <- [2]string{q, table}:
	case <-l.done:
		l.t.Fatalf("the load ended before %s", q)
	}
	if err := <-l.errs; err != nil {
		l.t.Fatalf("%s: %v", q, err)
	}
}

// stop ends the load and returns the number of its statements.
func (l *tableLoad) stop() int {
	l.quit()
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.count
}

// TestRenameRefusedBeforeOldDestination: a destination plugin built before the renamed_stream capability (testdest
// with no_renamed_stream, which declares itself so) would start the renamed table empty and leave the old one's
// rows behind. `skippr sync` stops at the rename instead — exit 1, state failed, the message naming the rename,
// the destination and the fix — and writes nothing of it to the WAL. Once the plugin is "upgraded" (the setting
// removed), the source sends the rename again from its last acknowledged point and the destination holds every
// row under the new name. Without the engine's check the first run succeeds and the rows stay split.
func TestRenameRefusedBeforeOldDestination(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	src := pgtest.NewDB(t)
	sc := pgConn(t, ctx, src)
	if _, err := sc.Exec(ctx, `CREATE TABLE orders (id bigint PRIMARY KEY, name text NOT NULL);
		INSERT INTO orders SELECT i, 'n' || i FROM generate_series(1, 100) i`); err != nil {
		t.Fatal(err)
	}
	e := harness.NewEnvWith(t, "postgres", "testdest")
	out := filepath.Join(e.Dir, "out")
	s := src.Server
	config := func(destExtra string) {
		e.WriteConfig(fmt.Sprintf(`connections:
  src:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: %s, port: %d, user: postgres, database: %s, sslmode: disable, tables: ["public.orders*"], slot: renames, publication: renames }
  sink:
    plugin: testdest
    version: "~> 0.1"
    settings: { dir: %s%s }
pipelines:
  orders:
    source: src
    destinations: [sink]
    wal:
      url: file://%s
`, s.Host, s.Port, src.Name, out, destExtra, filepath.Join(e.Dir, "wal")))
	}
	config(", no_renamed_stream: true")
	e.MustRun("sync", "--once")
	if _, err := sc.Exec(ctx, `INSERT INTO orders VALUES (101, 'before');
		ALTER TABLE orders RENAME TO orders_v2;
		INSERT INTO orders_v2 VALUES (102, 'after'); UPDATE orders_v2 SET name = 'changed' WHERE id = 1`); err != nil {
		t.Fatal(err)
	}
	r := e.Run("sync", "--once")
	for _, want := range []string{"renamed table public.orders to public.orders_v2", "destination sink does not follow a renamed table", "upgrade the plugin of destination sink"} {
		if r.Code != 1 || !strings.Contains(r.Stderr, want) {
			t.Fatalf("sync across the rename into a destination without renamed_stream: exit %d, want 1 (a pipeline failed) and %q\n%s", r.Code, want, r.Stderr)
		}
	}
	st := e.Run("status", "--json")
	if !strings.Contains(st.Stdout, `"failed"`) {
		t.Fatalf("status after the refusal does not say failed:\n%s", st.Stdout)
	}
	held, err := filedest.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(held.Tables["public.orders_v2"]); n != 0 {
		t.Fatalf("the refused rename reached the destination: %d rows under public.orders_v2", n)
	}

	config("")
	e.MustRun("sync", "--once")
	held, err = filedest.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	got := held.Tables["public.orders_v2"]
	if len(got) != 102 || len(held.Tables["public.orders"]) != 0 {
		t.Fatalf("after the upgrade: %d rows under public.orders_v2 (want 102) and %d under public.orders (want 0)", len(got), len(held.Tables["public.orders"]))
	}
	for k, row := range got {
		if fmt.Sprint(row["id"]) == "1" && row["name"] != "changed" {
			t.Fatalf("row %s after the upgrade: %v, want the update made after the rename", k, row)
		}
	}
}
