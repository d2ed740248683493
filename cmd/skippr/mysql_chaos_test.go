package main_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"

	"github.com/skippr-dev/skippr/internal/testplugins"
	"github.com/skippr-dev/skippr/testkit/mysqltest"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// mysqlChaos is a MariaDB source for a `skippr sync` killed at random: table shop.orders with 60000 rows and
// shop.items with 20000, snapshotted in parallel (snapshot_parallel: 4), a writer changing both, and schema
// changes of orders between the kill rounds.
type mysqlChaos struct {
	t   *testing.T
	ctx context.Context
	srv *mysqltest.Server
	src *sql.DB
	e   *env
}

// newMySQLChaos starts the server and the table; nType is the type of column n (the lake has no unsigned
// 64-bit integer, Postgres takes it as numeric).
func newMySQLChaos(t *testing.T, ctx context.Context, nType string) *mysqlChaos {
	srv, err := mysqltest.Start(ctx, mysqltest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	src, err := sql.Open("mysql", srv.DSN("", "root", ""))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	for _, q := range []string{
		"CREATE DATABASE shop",
		"CREATE TABLE shop.orders (id bigint PRIMARY KEY, name varchar(100) NOT NULL, amount decimal(12,2), n " + nType + ")",
		"INSERT INTO shop.orders SELECT seq, concat('n', seq), seq * 1.25, seq * 1000 FROM shop.seq_1_to_60000",
		"CREATE TABLE shop.items (id int PRIMARY KEY, sku varchar(20) NOT NULL, qty int NOT NULL)",
		"INSERT INTO shop.items SELECT seq, concat('sku', seq), seq % 100 FROM shop.seq_1_to_20000",
	} {
		if _, err := src.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	e := newEnv(t)
	// The mysql plugin joins this test's registry (the other tests do not need it built).
	e.mustRun("registry", "add", e.registry, testplugins.Build(t, "mysql"), "--name", "mysql", "--version", "0.1.0", "--os", "linux", "--arch", "amd64")
	e.mustRun("registry", "sign", e.registry, "--key", filepath.Join(e.dir, "keys", "skippr-ed25519.key"))
	return &mysqlChaos{t: t, ctx: ctx, srv: srv, src: src, e: e}
}

// config writes one pipeline shop.orders, shop.items → dst (a connection body in YAML flow style).
func (m *mysqlChaos) config(dstPlugin, dstSettings string) {
	m.e.writeConfig(fmt.Sprintf(`connections:
  src:
    plugin: mysql
    version: "~> 0.1"
    settings: { host: %[1]s, port: %[2]d, user: root, database: shop, tables: [orders, items], batch_size: 2000, snapshot_parallel: 4 }
  dst:
    plugin: %[3]s
    version: "~> 0.1"
    settings: %[4]s
pipelines:
  orders:
    source: src
    destinations: [dst]
    wal:
      url: file://%[5]s
      group_commit: { max_bytes: 256KiB, max_delay: 50ms }
`, m.srv.Host, m.srv.Port, dstPlugin, dstSettings, filepath.Join(m.e.dir, "wal")))
}

// run kills `skippr sync` at random while a writer runs: during the snapshot; then, once `sync --once` has
// finished the snapshot, across two schema changes — column note added by addNote while rows exist, then its
// default changed — so restarts resume from checkpoints on both sides of each change. It finishes with
// `sync --once` and returns the number of kills.
func (m *mysqlChaos) run(nValue, addNote string) int {
	stopWriter := startMySQLWriter(m.t, m.ctx, m.src, 60001, nValue)
	m.e.killSyncAtRandom(4, 500*time.Millisecond, 2500*time.Millisecond)
	// A busy writer leaves the source no idle moment for `--once` to stop at.
	stopWriter()
	m.e.mustRun("sync", "--once")
	stopWriter = startMySQLWriter(m.t, m.ctx, m.src, 500_001, nValue)
	kills := 4
	for _, ddl := range []string{addNote, "ALTER TABLE shop.orders ALTER COLUMN note SET DEFAULT 'later'"} {
		if _, err := m.src.ExecContext(m.ctx, ddl); err != nil {
			m.t.Fatalf("%s: %v", ddl, err)
		}
		m.e.killSyncAtRandom(4, 500*time.Millisecond, 2500*time.Millisecond)
		kills += 4
	}
	stopWriter()
	m.e.mustRun("sync", "--once")
	return kills
}

// want is the source table orders: id → "name|note|amount|n".
func (m *mysqlChaos) want() map[string]string {
	return m.rows("SELECT id, concat(name, '|', coalesce(note, '<null>'), '|', coalesce(amount, ''), '|', coalesce(n, '')) FROM shop.orders")
}

// wantItems is the source table items: id → "sku|qty".
func (m *mysqlChaos) wantItems() map[string]string {
	return m.rows("SELECT id, concat(sku, '|', qty) FROM shop.items")
}

// rows runs a query of (key, text) pairs.
func (m *mysqlChaos) rows(q string) map[string]string {
	rows, err := m.src.QueryContext(m.ctx, q)
	if err != nil {
		m.t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, s string
		if err := rows.Scan(&id, &s); err != nil {
			m.t.Fatal(err)
		}
		out[id] = s
	}
	if err := rows.Err(); err != nil {
		m.t.Fatal(err)
	}
	return out
}

// sameTable fails the test at the first row the destination holds differently from the source.
func sameTable(t *testing.T, want, got map[string]string) {
	t.Helper()
	if len(want) != len(got) {
		t.Errorf("source has %d rows, destination %d", len(want), len(got))
	}
	ids := make([]string, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if got[id] != want[id] {
			t.Fatalf("id %s differs:\nsource      %s\ndestination %s", id, want[id], got[id])
		}
	}
}

// TestMySQLToPostgresSurvivesSIGKILL runs a MariaDB → Postgres pipeline through `skippr sync` while a writer
// changes the source and two schema changes run, SIGKILLs the engine during the snapshot and during
// streaming, and then compares the two tables row by row.
func TestMySQLToPostgresSurvivesSIGKILL(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	m := newMySQLChaos(t, ctx, "bigint unsigned")
	dst := pgtest.NewDB(t)
	m.config("postgres", fmt.Sprintf("{ host: %s, port: %d, user: postgres, database: %s, sslmode: disable }", dst.Server.Host, dst.Server.Port, dst.Name))
	kills := m.run("18446744073709551615", "ALTER TABLE shop.orders ADD COLUMN note varchar(20) NOT NULL DEFAULT 'none' AFTER name")

	pc, err := pgx.Connect(ctx, dst.ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close(context.Background())
	prow, err := pc.Query(ctx, `SELECT id::text, name || '|' || coalesce(note, '<null>') || '|' || coalesce(amount::text, '') || '|' || coalesce(n::text, '') FROM orders`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for prow.Next() {
		var id, s string
		if err := prow.Scan(&id, &s); err != nil {
			t.Fatal(err)
		}
		got[id] = s
	}
	want := m.want()
	sameTable(t, want, got)
	items := map[string]string{}
	irow, err := pc.Query(ctx, `SELECT id::text, sku || '|' || qty FROM items`)
	if err != nil {
		t.Fatal(err)
	}
	for irow.Next() {
		var id, s string
		if err := irow.Scan(&id, &s); err != nil {
			t.Fatal(err)
		}
		items[id] = s
	}
	wantItems := m.wantItems()
	sameTable(t, wantItems, items)
	t.Logf("%d SIGKILLs during snapshot and streaming, across 2 schema changes; %d + %d rows equal in source and destination", kills, len(want), len(wantItems))
}

// TestMySQLToIcebergSurvivesSIGKILL is the same run into the embedded Iceberg lake, compared by scanning the
// lake table (deletes applied).
func TestMySQLToIcebergSurvivesSIGKILL(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	m := newMySQLChaos(t, ctx, "bigint")
	lakeSettings := fmt.Sprintf(`{"catalog": {"warehouse": %q}, "namespace": "lake"}`, filepath.Join(m.e.dir, "lake"))
	m.config("iceberg", lakeSettings)
	// Nullable without a default: the lake cannot give rows that existed before the column a value (an Iceberg
	// v2 table has no initial-default; plugins/iceberg logs it), so the source's must be NULL too.
	kills := m.run("9223372036854775807", "ALTER TABLE shop.orders ADD COLUMN note varchar(20) AFTER name")

	got := map[string]string{}
	for id, row := range scanLake(t, lakeSettings, "shop.orders") {
		text := func(col string) string {
			if row[col] == nil {
				return ""
			}
			return fmt.Sprint(row[col])
		}
		note := text("note")
		if row["note"] == nil {
			note = "<null>"
		}
		// The scan writes decimal(12,2) as a JSON number (12.5); the source as text with its scale (12.50).
		amount := text("amount")
		if f, err := strconv.ParseFloat(amount, 64); err == nil {
			amount = strconv.FormatFloat(f, 'f', 2, 64)
		}
		got[id] = text("name") + "|" + note + "|" + amount + "|" + text("n")
	}
	want := m.want()
	sameTable(t, want, got)
	items := map[string]string{}
	for id, row := range scanLake(t, lakeSettings, "shop.items") {
		items[id] = fmt.Sprint(row["sku"]) + "|" + fmt.Sprint(row["qty"])
	}
	wantItems := m.wantItems()
	sameTable(t, wantItems, items)
	t.Logf("%d SIGKILLs during snapshot and streaming, across 2 schema changes; %d + %d rows equal in source and lake", kills, len(want), len(wantItems))
}

// startMySQLWriter keeps changing shop.orders (and shop.items: updates, upserts) — inserts from id next on (n = nValue), updates (some of the
// key, some of column note once it exists) and deletes of random earlier ids, in small transactions — until
// the returned stop is called. Its statements name their columns, so they run on across added columns.
func startMySQLWriter(t *testing.T, ctx context.Context, w *sql.DB, next int64, nValue string) (stop func()) {
	writerCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(1, 2))
		for writerCtx.Err() == nil {
			id := 1 + rng.Int64N(min(next-1, 70_000)) // mostly rows that exist
			var q string
			switch rng.IntN(7) {
			case 5:
				q = fmt.Sprintf(`UPDATE shop.items SET qty = qty + 1 WHERE id = %d`, 1+rng.IntN(25_000))
			case 6:
				q = fmt.Sprintf(`INSERT INTO shop.items VALUES (%d, 'new', 1) ON DUPLICATE KEY UPDATE sku = concat(sku, '+')`, 20_000+rng.IntN(10_000))
			case 0:
				q = fmt.Sprintf(`INSERT INTO shop.orders (id, name, amount, n) VALUES (%d, 'new', 1.5, %s)`, next, nValue)
				next++
			case 1:
				q = fmt.Sprintf(`UPDATE shop.orders SET name = concat(name, '+'), amount = amount + 1 WHERE id = %d`, id)
			case 2:
				q = fmt.Sprintf(`UPDATE IGNORE shop.orders SET id = %d WHERE id = %d`, next+1_000_000, id)
			case 3:
				q = fmt.Sprintf(`UPDATE shop.orders SET note = concat(coalesce(note, ''), 'w') WHERE id = %d`, id)
			default:
				q = fmt.Sprintf(`DELETE FROM shop.orders WHERE id = %d`, id)
			}
			_, err := w.ExecContext(writerCtx, q)
			var me *mysqldrv.MySQLError
			if errors.As(err, &me) && me.Number == 1054 {
				continue // column note, before it is added
			}
			if err != nil && writerCtx.Err() == nil {
				t.Errorf("writer: %s: %v", q, err)
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	return func() { cancel(); wg.Wait() }
}
