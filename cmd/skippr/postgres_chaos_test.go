package main_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// TestPostgresToPostgresSurvivesSIGKILL runs a Postgres → Postgres pipeline through `skippr sync` while a
// writer changes the source, SIGKILLs the engine during the snapshot and during streaming, and then compares
// the two tables row by row.
func TestPostgresToPostgresSurvivesSIGKILL(t *testing.T) {
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
	createOrders(t, ctx, sc, 60000)

	e := newEnv(t)
	s := src.Server
	e.writeConfig(fmt.Sprintf(`connections:
  src:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: %[1]s, port: %[2]d, user: postgres, database: %[3]s, sslmode: disable, tables: [public.orders], slot: chaos, publication: chaos, batch_size: 2000 }
  dst:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: %[1]s, port: %[2]d, user: postgres, database: %[4]s, sslmode: disable }
pipelines:
  orders:
    source: src
    destinations: [dst]
    wal:
      url: file://%[5]s
      group_commit: { max_bytes: 256KiB, max_delay: 50ms }
`, s.Host, s.Port, src.Name, dst.Name, filepath.Join(e.dir, "wal")))

	stopWriter := startOrdersWriter(t, ctx, conn(src), 60001)
	kills := 10
	e.killSyncAtRandom(kills, 500*time.Millisecond, 2500*time.Millisecond)
	stopWriter()
	// Catch up: the source turns idle once the slot has sent everything written so far.
	e.mustRun("sync", "--once")

	dump := func(c *pgx.Conn) []string {
		rows, err := c.Query(ctx, `SELECT id::text || '|' || name || '|' || coalesce(amount::text, '') || '|' || coalesce(tags::text, '') || '|' || coalesce(doc::text, '') || '|' || coalesce(at::text, '') FROM orders ORDER BY id`)
		if err != nil {
			t.Fatal(err)
		}
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
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
	t.Logf("%d SIGKILLs during snapshot and streaming; %d rows equal in source and destination", kills, len(want))

	// Removing the pipeline: teardown drops the slot, so it stops holding the source's WAL.
	r := e.mustRun("teardown", "orders")
	if !strings.Contains(r.stdout, "released replication slot chaos") || !strings.Contains(r.stdout, "released publication chaos") {
		t.Fatalf("teardown: %s", r.stdout)
	}
	var slots int
	if err := sc.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'chaos'`).Scan(&slots); err != nil || slots != 0 {
		t.Fatalf("slot chaos still exists after teardown (%d, %v)", slots, err)
	}
}

// createOrders creates the chaos tests' source table with n rows.
func createOrders(t *testing.T, ctx context.Context, c *pgx.Conn, n int) {
	t.Helper()
	for _, q := range []string{
		`CREATE TABLE orders (id bigint PRIMARY KEY, name text NOT NULL, amount numeric(12,2), tags text[], doc jsonb, at timestamptz)`,
		fmt.Sprintf(`INSERT INTO orders SELECT i, 'n' || i, i * 1.25, ARRAY['a', 'b' || (i %% 5)], jsonb_build_object('k', i), '2026-01-01'::timestamptz + i * interval '1 second' FROM generate_series(1, %d) i`, n),
	} {
		if _, err := c.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
}

// startOrdersWriter keeps changing orders through w — inserts from id next on, updates and deletes of
// random earlier ids, in small transactions — until the returned stop is called (stop waits for it).
func startOrdersWriter(t *testing.T, ctx context.Context, w *pgx.Conn, next int64) (stop func()) {
	writerCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(1, 2))
		for writerCtx.Err() == nil {
			id := 1 + rng.Int64N(next-1)
			var q string
			switch rng.IntN(3) {
			case 0:
				q = fmt.Sprintf(`INSERT INTO orders VALUES (%d, 'new', 1.5, ARRAY['x'], '{"new": true}', now())`, next)
				next++
			case 1:
				q = fmt.Sprintf(`UPDATE orders SET name = name || '+', amount = amount + 1, doc = doc || '{"u": 1}' WHERE id = %d`, id)
			default:
				q = fmt.Sprintf(`DELETE FROM orders WHERE id = %d`, id)
			}
			if _, err := w.Exec(writerCtx, q); err != nil && writerCtx.Err() == nil {
				t.Errorf("writer: %v", err)
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	return func() { cancel(); wg.Wait() }
}
