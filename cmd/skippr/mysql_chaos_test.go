package main_test

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"

	"github.com/skippr-dev/skippr/internal/testplugins"
	"github.com/skippr-dev/skippr/testkit/mysqltest"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// TestMySQLToPostgresSurvivesSIGKILL runs a MariaDB → Postgres pipeline through `skippr sync` while a writer
// changes the source, SIGKILLs the engine during the snapshot and during streaming, and then compares the
// two tables row by row.
func TestMySQLToPostgresSurvivesSIGKILL(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
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
		"CREATE TABLE shop.orders (id bigint PRIMARY KEY, name varchar(100) NOT NULL, amount decimal(12,2), n bigint unsigned)",
		"INSERT INTO shop.orders SELECT seq, concat('n', seq), seq * 1.25, seq * 1000 FROM shop.seq_1_to_60000",
	} {
		if _, err := src.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	dst := pgtest.NewDB(t)

	e := newEnv(t)
	// The mysql plugin joins this test's registry (the other tests do not need it built).
	e.mustRun("registry", "add", e.registry, testplugins.Build(t, "mysql"), "--name", "mysql", "--version", "0.1.0", "--os", "linux", "--arch", "amd64")
	e.mustRun("registry", "sign", e.registry, "--key", filepath.Join(e.dir, "keys", "skippr-ed25519.key"))
	e.writeConfig(fmt.Sprintf(`connections:
  src:
    plugin: mysql
    version: "~> 0.1"
    settings: { host: %[1]s, port: %[2]d, user: root, database: shop, tables: [orders], batch_size: 2000 }
  dst:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: %[3]s, port: %[4]d, user: postgres, database: %[5]s, sslmode: disable }
pipelines:
  orders:
    source: src
    destinations: [dst]
    wal:
      url: file://%[6]s
      group_commit: { max_bytes: 256KiB, max_delay: 50ms }
`, srv.Host, srv.Port, dst.Server.Host, dst.Server.Port, dst.Name, filepath.Join(e.dir, "wal")))

	stopWriter := startMySQLWriter(t, ctx, src, 60001)
	kills := 10
	e.killSyncAtRandom(kills, 500*time.Millisecond, 2500*time.Millisecond)
	stopWriter()
	e.mustRun("sync", "--once")

	rows, err := src.QueryContext(ctx, "SELECT concat(id, '|', name, '|', coalesce(amount, ''), '|', coalesce(n, '')) FROM shop.orders ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		want = append(want, s)
	}
	pc, err := pgx.Connect(ctx, dst.ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close(context.Background())
	prow, err := pc.Query(ctx, `SELECT id::text || '|' || name || '|' || coalesce(amount::text, '') || '|' || coalesce(n::text, '') FROM orders ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(prow, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(want) != len(got) {
		t.Fatalf("source has %d rows, destination %d", len(want), len(got))
	}
	for i := range want {
		if want[i] != got[i] {
			t.Fatalf("row %d differs:\nsource      %s\ndestination %s", i, want[i], got[i])
		}
	}
	t.Logf("%d SIGKILLs during snapshot and streaming; %d rows equal in source and destination", kills, len(want))
}

// startMySQLWriter keeps changing shop.orders — inserts from id next on, updates (some of the key) and
// deletes of random earlier ids, in small transactions — until the returned stop is called.
func startMySQLWriter(t *testing.T, ctx context.Context, w *sql.DB, next int64) (stop func()) {
	writerCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(1, 2))
		for writerCtx.Err() == nil {
			id := 1 + rng.Int64N(next-1)
			var q string
			switch rng.IntN(4) {
			case 0:
				q = fmt.Sprintf(`INSERT INTO shop.orders VALUES (%d, 'new', 1.5, 18446744073709551615)`, next)
				next++
			case 1:
				q = fmt.Sprintf(`UPDATE shop.orders SET name = concat(name, '+'), amount = amount + 1 WHERE id = %d`, id)
			case 2:
				q = fmt.Sprintf(`UPDATE IGNORE shop.orders SET id = %d WHERE id = %d`, next+1_000_000, id)
			default:
				q = fmt.Sprintf(`DELETE FROM shop.orders WHERE id = %d`, id)
			}
			if _, err := w.ExecContext(writerCtx, q); err != nil && writerCtx.Err() == nil {
				t.Errorf("writer: %s: %v", q, err)
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	return func() { cancel(); wg.Wait() }
}
