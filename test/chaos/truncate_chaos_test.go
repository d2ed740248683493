package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skippr-dev/skippr/test/harness"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// TestPostgresTruncateSurvivesSIGKILL runs Postgres → (Postgres, Iceberg) through `skippr sync` (truncate:
// propagate, the default) while a writer changes the source in small transactions, some of which hold rows
// before and after a TRUNCATE, SIGKILLs the engine at random points, and then compares both destinations
// with the source row by row.
func TestPostgresTruncateSurvivesSIGKILL(t *testing.T) {
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
	harness.CreateOrders(t, ctx, sc, 5000)

	e := harness.NewEnv(t)
	s := src.Server
	lakeSettings := fmt.Sprintf(`{"catalog": {"warehouse": %q}, "namespace": "lake"}`, filepath.Join(e.Dir, "lake"))
	e.WriteConfig(fmt.Sprintf(`connections:
  src:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: %[1]s, port: %[2]d, user: postgres, database: %[3]s, sslmode: disable, tables: [public.orders], slot: trunc, publication: trunc, batch_size: 500 }
  dst:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: %[1]s, port: %[2]d, user: postgres, database: %[4]s, sslmode: disable }
  lake:
    plugin: iceberg
    version: "~> 0.1"
    settings: %[6]s
pipelines:
  orders:
    source: src
    destinations: [dst, lake]
    wal:
      url: file://%[5]s
      group_commit: { max_bytes: 64KiB, max_delay: 50ms }
`, s.Host, s.Port, src.Name, dst.Name, filepath.Join(e.Dir, "wal"), lakeSettings))

	w := conn(src)
	writerCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var truncates int
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(3, 4))
		next := int64(5001)
		for i := 0; writerCtx.Err() == nil; i++ {
			var q string
			id := 1 + rng.Int64N(next-1)
			switch {
			case i%150 == 149:
				// Rows before and after the TRUNCATE in one transaction: only the ones after it survive.
				q = fmt.Sprintf(`BEGIN;
					INSERT INTO orders VALUES (%[1]d, 'before', 1, ARRAY['x'], '{}', now());
					UPDATE orders SET name = name || '*' WHERE id = %[2]d;
					TRUNCATE orders;
					INSERT INTO orders SELECT g, 'after', g, ARRAY['y'], '{"t": 1}', now() FROM generate_series(%[3]d, %[3]d + 199) g;
					UPDATE orders SET name = 'after+' WHERE id = %[3]d + 7;
					DELETE FROM orders WHERE id = %[3]d + 8;
					COMMIT`, next, id, next+1)
				next += 201
				truncates++
			case i%3 == 0:
				q = fmt.Sprintf(`INSERT INTO orders VALUES (%d, 'new', 1.5, ARRAY['x'], '{"new": true}', now())`, next)
				next++
			case i%3 == 1:
				q = fmt.Sprintf(`UPDATE orders SET name = name || '+', amount = amount + 1 WHERE id = %d`, id)
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
	kills := 8
	e.KillSyncAtRandom(kills, 700*time.Millisecond, 3*time.Second)
	stop()
	wg.Wait()
	if truncates == 0 {
		t.Fatal("the writer made no TRUNCATE: the test tests nothing")
	}
	e.MustRun("sync", "--once")

	dump := func(c *pgx.Conn) []string {
		rows, err := c.Query(ctx, `SELECT id::text || '|' || name || '|' || coalesce(amount::text, '') FROM orders ORDER BY id`)
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
		t.Fatalf("source has %d rows, postgres destination %d", len(want), len(got))
	}
	for i := range want {
		if want[i] != got[i] {
			t.Fatalf("row %d differs:\nsource      %s\ndestination %s", i, want[i], got[i])
		}
	}
	lake := harness.ScanLake(t, lakeSettings, "public.orders")
	if len(lake) != len(want) {
		t.Fatalf("source has %d rows, lake %d", len(want), len(lake))
	}
	rows, err := sc.Query(ctx, `SELECT id::text, name FROM orders`)
	if err != nil {
		t.Fatal(err)
	}
	type idName struct {
		ID, Name string
	}
	src2, err := pgx.CollectRows(rows, pgx.RowToStructByPos[idName])
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range src2 {
		l, ok := lake[r.ID]
		if !ok || fmt.Sprint(l["name"]) != r.Name {
			t.Fatalf("id %s: source name %q, lake row %v", r.ID, r.Name, l)
		}
	}
	t.Logf("%d SIGKILLs, %d TRUNCATEs between rows; %d rows equal in source, postgres and lake", kills, truncates, len(want))
}
