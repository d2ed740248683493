package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/test/harness"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// TestMySQLRenameColumn: while a writer changes shop.orders, the source renames two of its columns
// (RENAME COLUMN amount TO price, then CHANGE COLUMN name title …), and `skippr sync` is SIGKILLed at random
// around each rename, so ranges holding a rename are applied again after a restart. Afterwards every row of
// Postgres, DuckDB and the Iceberg lake equals the source's under the new names — the rows written before the
// renames carry their values there — and no destination has the old columns back. Without the rename marker
// (change.RenamedFromMeta) the old rows are NULL under price and title.
func TestMySQLRenameColumn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	m := harness.NewMySQLChaos(t, ctx, "bigint")
	e := m.E
	pg := pgtest.NewDB(t)
	duck := fmt.Sprintf(`{"path": %q}`, filepath.Join(e.Dir, "dest", "orders.duckdb"))
	lake := fmt.Sprintf(`{"catalog": {"warehouse": %q}, "namespace": "lake"}`, filepath.Join(e.Dir, "lake"))
	e.WriteConfig(fmt.Sprintf(`connections:
  src:
    plugin: mysql
    version: "~> 0.1"
    settings: { host: %[1]s, port: %[2]d, user: root, database: shop, tables: [orders], batch_size: 2000 }
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
    settings: %[7]s
pipelines:
  orders:
    source: src
    destinations: [pg, duck, lake]
    wal:
      url: file://%[8]s
      group_commit: { max_bytes: 64KiB, max_delay: 50ms }
`, m.Srv.Host, m.Srv.Port, pg.Server.Host, pg.Server.Port, pg.Name, duck, lake, filepath.Join(e.Dir, "wal")))
	e.MustRun("sync", "--once")

	load := startRenameLoad(t, ctx, func(ctx context.Context, q string) error { _, err := m.Src.ExecContext(ctx, q); return err }, "shop.orders")
	e.KillSyncAtRandom(2, 500*time.Millisecond, 2000*time.Millisecond)
	for _, ddl := range []string{
		"ALTER TABLE shop.orders RENAME COLUMN amount TO price",
		"ALTER TABLE shop.orders CHANGE COLUMN name title varchar(120) NOT NULL",
	} {
		load.ddl(ddl)
		e.KillSyncAtRandom(3, 500*time.Millisecond, 2500*time.Millisecond)
	}
	statements := load.stop()
	e.MustRun("sync", "--once")
	t.Logf("%d statements of load, 8 SIGKILLs", statements)

	want := m.Rows("SELECT id, concat(title, '|', coalesce(price, ''), '|', coalesce(n, '')) FROM shop.orders")
	sameAfterRenames(t, ctx, e, want, pg, "public.orders", duck, lake, "shop.orders")
}

// TestPostgresRenameColumn is TestMySQLRenameColumn for a PostgreSQL 15 source: the renames (RENAME COLUMN
// amount TO price, then name TO title) are read from pgoutput's Relation messages. Without the detection the
// old rows are NULL under price and title.
func TestPostgresRenameColumn(t *testing.T) {
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
	lake := fmt.Sprintf(`{"catalog": {"warehouse": %q}, "namespace": "lake"}`, filepath.Join(e.Dir, "lake"))
	s := src.Server
	e.WriteConfig(fmt.Sprintf(`connections:
  src:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: %[1]s, port: %[2]d, user: postgres, database: %[3]s, sslmode: disable, tables: [public.orders], slot: renames, publication: renames, batch_size: 2000 }
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
    settings: %[6]s
pipelines:
  orders:
    source: src
    destinations: [pg, duck, lake]
    wal:
      url: file://%[7]s
      group_commit: { max_bytes: 64KiB, max_delay: 50ms }
`, s.Host, s.Port, src.Name, pg.Name, duck, lake, filepath.Join(e.Dir, "wal")))
	e.MustRun("sync", "--once")

	wc := pgConn(t, ctx, src)
	load := startRenameLoad(t, ctx, func(ctx context.Context, q string) error { _, err := wc.Exec(ctx, q); return err }, "orders")
	e.KillSyncAtRandom(2, 500*time.Millisecond, 2000*time.Millisecond)
	for _, ddl := range []string{
		"ALTER TABLE orders RENAME COLUMN amount TO price",
		"ALTER TABLE orders RENAME COLUMN name TO title",
	} {
		load.ddl(ddl)
		e.KillSyncAtRandom(3, 500*time.Millisecond, 2500*time.Millisecond)
	}
	statements := load.stop()
	e.MustRun("sync", "--once")
	t.Logf("%d statements of load, 8 SIGKILLs", statements)

	rows, err := sc.Query(ctx, `SELECT id::text, concat(title, '|', coalesce(price::text, ''), '|', coalesce(n::text, '')) FROM orders`)
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
	sameAfterRenames(t, ctx, e, want, pg, "public.orders", duck, lake, "public.orders")
}

// sameAfterRenames compares the source's rows (id → "title|price|n") with those of the Postgres table, the
// DuckDB and the lake streams, and checks that no destination has the old columns (amount, name) back; and
// `skippr query --as-of-lake` (DuckDB over the lake's files, columns matched by field id) finds the values of
// the files written before the renames under the new names.
func sameAfterRenames(t *testing.T, ctx context.Context, e *harness.Env, want map[string]string, pg *pgtest.DB, pgTable, duck, lake, stream string) {
	t.Helper()
	row := func(title, price, n any) string {
		p := ""
		if price != nil {
			f, err := strconv.ParseFloat(fmt.Sprint(price), 64)
			if err != nil {
				t.Fatalf("price %v: %v", price, err)
			}
			p = strconv.FormatFloat(f, 'f', 2, 64)
		}
		s := ""
		if n != nil {
			s = fmt.Sprint(n)
		}
		return fmt.Sprintf("%v|%s|%s", title, p, s)
	}

	c := pgConn(t, ctx, pg)
	var cols string
	if err := c.QueryRow(ctx, `SELECT string_agg(attname, ',' ORDER BY attnum) FROM pg_attribute
		WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped`, pgTable).Scan(&cols); err != nil {
		t.Fatal(err)
	}
	if cols != "id,title,price,n" {
		t.Errorf("postgres: columns %s, want id,title,price,n", cols)
	}
	rows, err := c.Query(ctx, `SELECT id::text, title, price::text, n FROM `+pgTable)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for rows.Next() {
		var (
			id, title string
			price     *string
			n         *int64
		)
		if err := rows.Scan(&id, &title, &price, &n); err != nil {
			t.Fatal(err)
		}
		var p, nn any
		if price != nil {
			p = *price
		}
		if n != nil {
			nn = *n
		}
		got[id] = row(title, p, nn)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	t.Run("postgres", func(t *testing.T) { harness.SameTable(t, want, got) })

	for name, dump := range map[string]map[string]map[string]any{
		"duckdb":  harness.DumpDuckDB(t, duck, stream),
		"iceberg": harness.ScanLake(t, lake, stream),
	} {
		t.Run(name, func(t *testing.T) {
			got := map[string]string{}
			for id, r := range dump {
				for _, old := range []string{"amount", "name"} {
					if _, ok := r[old]; ok {
						t.Fatalf("row %s has the old column %s: %v", id, old, r)
					}
				}
				got[id] = row(r["title"], r["price"], r["n"])
			}
			harness.SameTable(t, want, got)
		})
	}
	prices := 0
	for _, v := range want {
		if strings.Split(v, "|")[1] != "" {
			prices++
		}
	}
	q := harness.Show(e.QueryJSON(`SELECT count(*) AS n, count(price) AS p, count(title) AS t FROM lake."`+stream+`"`, true))
	if w := fmt.Sprintf(`[{"n":%d,"p":%d,"t":%d}]`, len(want), prices, len(want)); q != w {
		t.Errorf("skippr query --as-of-lake: %s, want %s", q, w)
	}
	t.Logf("%d rows equal in the source, Postgres, DuckDB and Iceberg after the renames", len(want))
}

// renameLoad changes shop.orders (inserts, updates of every column, deletes) in small statements until
// stopped, and runs the test's DDL between two of its statements, so that every statement names the columns
// as they are.
type renameLoad struct {
	t     *testing.T
	ddls  chan string
	errs  chan error
	done  chan struct{} // closed when the load ends
	count int
	quit  context.CancelFunc
}

func startRenameLoad(t *testing.T, ctx context.Context, exec func(context.Context, string) error, table string) *renameLoad {
	ctx, cancel := context.WithCancel(ctx)
	l := &renameLoad{t: t, ddls: make(chan string), errs: make(chan error), done: make(chan struct{}), quit: cancel}
	names := map[string]string{"amount": "amount", "name": "name"}
	go func() {
		defer close(l.done)
		rng := rand.New(rand.NewPCG(3, 4))
		next := int64(700_000)
		for ctx.Err() == nil {
			select {
			case ddl := <-l.ddls:
				err := exec(ctx, ddl)
				if err == nil {
					if strings.Contains(ddl, "price") {
						names["amount"] = "price"
					}
					if strings.Contains(ddl, "title") {
						names["name"] = "title"
					}
				}
				l.errs <- err
				continue
			default:
			}
			id := 1 + rng.Int64N(60_000)
			var q string
			switch rng.IntN(5) {
			case 0:
				q = fmt.Sprintf("INSERT INTO %s (id, %s, %s, n) VALUES (%d, 'new', 2.5, 7)", table, names["name"], names["amount"], next)
				next++
			case 1:
				q = fmt.Sprintf("UPDATE %[3]s SET %[1]s = %[1]s + 1 WHERE id = %[2]d", names["amount"], id, table)
			case 2:
				q = fmt.Sprintf("UPDATE %[3]s SET %[1]s = concat(%[1]s, '+') WHERE id = %[2]d", names["name"], id, table)
			case 3:
				q = fmt.Sprintf("UPDATE %s SET n = n + 1 WHERE id = %d", table, id)
			default:
				q = fmt.Sprintf("DELETE FROM %s WHERE id = %d", table, id)
			}
			if err := exec(ctx, q); err != nil {
				if ctx.Err() == nil {
					t.Errorf("load: %s: %v", q, err)
				}
				return
			}
			l.count++
			time.Sleep(2 * time.Millisecond)
		}
	}()
	return l
}

// ddl runs a statement between two of the load's.
func (l *renameLoad) ddl(q string) {
	l.t.Helper()
	select {
	case l.ddls <- q:
	case <-l.done:
		l.t.Fatalf("the load ended before %s", q)
	}
	if err := <-l.errs; err != nil {
		l.t.Fatalf("%s: %v", q, err)
	}
}

// stop ends the load and returns the number of its statements.
func (l *renameLoad) stop() int {
	l.quit()
	<-l.done
	return l.count
}
