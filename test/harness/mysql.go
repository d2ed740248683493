package harness

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"
	"github.com/skippr-dev/skippr/internal/testplugins"
	"github.com/skippr-dev/skippr/testkit/mysqltest"
)

// mysqlChaos is a MariaDB source for a `skippr sync` killed at random: table shop.orders with 60000 rows and
// shop.items with 20000, snapshotted in parallel (snapshot_parallel: 4), a writer changing both, and schema
// changes of orders between the kill rounds.
type mysqlChaos struct {
	t   *testing.T
	ctx context.Context
	Srv *mysqltest.Server
	Src *sql.DB
	E   *Env
}

// NewMySQLChaos starts the server and the table; nType is the type of column n (the lake has no unsigned
// 64-bit integer, Postgres takes it as numeric).
func NewMySQLChaos(t *testing.T, ctx context.Context, nType string) *mysqlChaos {
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
	e := NewEnv(t)
	// The mysql plugin joins this test's registry (the other tests do not need it built).
	e.MustRun("registry", "add", e.Registry, testplugins.Build(t, "mysql"), "--name", "mysql", "--version", "0.1.0", "--os", "linux", "--arch", "amd64")
	e.MustRun("registry", "sign", e.Registry, "--key", filepath.Join(e.Dir, "keys", "skippr-ed25519.key"))
	return &mysqlChaos{t: t, ctx: ctx, Srv: srv, Src: src, E: e}
}

// Config writes one pipeline shop.orders, shop.items → dst (a connection body in YAML flow style).
func (m *mysqlChaos) Config(dstPlugin, dstSettings string) {
	m.E.WriteConfig(fmt.Sprintf(`connections:
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
`, m.Srv.Host, m.Srv.Port, dstPlugin, dstSettings, filepath.Join(m.E.Dir, "wal")))
}

// Run kills `skippr sync` at random while a writer runs: during the snapshot; then, once `sync --once` has
// finished the snapshot, across two schema changes — column note added by addNote while rows exist, then its
// default changed — so restarts resume from checkpoints on both sides of each change. It finishes with
// `sync --once` and returns the number of kills.
func (m *mysqlChaos) Run(nValue, addNote string) int {
	stopWriter := StartMySQLWriter(m.t, m.ctx, m.Src, 60001, nValue)
	m.E.KillSyncAtRandom(4, 500*time.Millisecond, 2500*time.Millisecond)
	// A busy writer leaves the source no idle moment for `--once` to stop at.
	stopWriter()
	m.E.MustRun("sync", "--once")
	stopWriter = StartMySQLWriter(m.t, m.ctx, m.Src, 500_001, nValue)
	kills := 4
	for _, ddl := range []string{addNote, "ALTER TABLE shop.orders ALTER COLUMN note SET DEFAULT 'later'"} {
		if _, err := m.Src.ExecContext(m.ctx, ddl); err != nil {
			m.t.Fatalf("%s: %v", ddl, err)
		}
		m.E.KillSyncAtRandom(4, 500*time.Millisecond, 2500*time.Millisecond)
		kills += 4
	}
	stopWriter()
	m.E.MustRun("sync", "--once")
	return kills
}

// Want is the source table orders: id → "name|note|amount|n".
func (m *mysqlChaos) Want() map[string]string {
	return m.Rows("SELECT id, concat(name, '|', coalesce(note, '<null>'), '|', coalesce(amount, ''), '|', coalesce(n, '')) FROM shop.orders")
}

// WantItems is the source table items: id → "sku|qty".
func (m *mysqlChaos) WantItems() map[string]string {
	return m.Rows("SELECT id, concat(sku, '|', qty) FROM shop.items")
}

// Rows runs a query of (key, text) pairs.
func (m *mysqlChaos) Rows(q string) map[string]string {
	rows, err := m.Src.QueryContext(m.ctx, q)
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

// SameTable fails the test at the first row the destination holds differently from the source.
func SameTable(t *testing.T, want, got map[string]string) {
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

// StartMySQLWriter keeps changing shop.orders (and shop.items: updates, upserts) — inserts from id next on (n = nValue), updates (some of the
// key, some of column note once it exists) and deletes of random earlier ids, in small transactions — until
// the returned stop is called. Its statements name their columns, so they run on across added columns.
func StartMySQLWriter(t *testing.T, ctx context.Context, w *sql.DB, next int64, nValue string) (stop func()) {
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
