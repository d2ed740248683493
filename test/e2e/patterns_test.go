package e2e

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skippr-dev/skippr/test/harness"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// TestPatternTableCreatedWhileStreaming: a Postgres source with tables: ["shop.*"] streams into a Postgres
// destination while a table created in schema shop, already holding 60,000 rows, is written to without pause
// (inserts, updates, deletes); `skippr sync` is SIGKILLed as the new table's copy begins and at random points
// after, and at the end the new table must equal the source row by row. Meanwhile another matching table is
// dropped: it is released, and its destination table keeps the rows it had. `skippr status` lists the capture
// set. Without the pattern's adoption of the new table it is never in the destination.
func TestPatternTableCreatedWhileStreaming(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	src, dst := pgtest.NewDB(t), pgtest.NewDB(t)
	sc := pgConn(t, ctx, src)
	for _, q := range []string{
		`CREATE SCHEMA shop`,
		`CREATE TABLE shop.items (id bigint PRIMARY KEY, name text NOT NULL)`,
		`INSERT INTO shop.items SELECT i, 'item ' || i FROM generate_series(1, 500) i`,
		`CREATE TABLE shop.old (id bigint PRIMARY KEY, name text NOT NULL)`,
		`INSERT INTO shop.old SELECT i, 'old ' || i FROM generate_series(1, 300) i`,
	} {
		if _, err := sc.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	e := harness.NewEnv(t)
	e.WriteConfig(fmt.Sprintf(`connections:
  src:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: %[1]s, port: %[2]d, user: postgres, database: %[3]s, sslmode: disable, tables: ["shop.*"], slot: pat, publication: pat, batch_size: 250 }
  dst:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: %[1]s, port: %[2]d, user: postgres, database: %[4]s, sslmode: disable }
pipelines:
  shop:
    source: src
    destinations: [dst]
    wal:
      url: file://%[5]s
      group_commit: { max_bytes: 64KiB, max_delay: 50ms }
`, src.Server.Host, src.Server.Port, src.Name, dst.Name, filepath.Join(e.Dir, "wal")))
	e.MustRun("sync", "--once")

	bg := e.Cmd(ctx, "sync")
	var bgErr bytes.Buffer
	bg.Stderr = &bgErr
	if err := bg.Start(); err != nil {
		t.Fatal(err)
	}
	waitStatus := func(want string) {
		t.Helper()
		for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
			st := e.MustRun("status", "shop").Stdout
			if strings.Contains(st, want) {
				return
			}
			if time.Now().After(deadline) {
				bg.Process.Signal(syscall.SIGKILL)
				bg.Wait()
				t.Fatalf("status never said %q:\n%s\nthe running sync's stderr:\n%s", want, st, bgErr.String())
			}
		}
	}
	// A matching table dropped while streaming is released and reported; the pipeline goes on.
	waitStatus("shop: captures 2 tables: shop.items (pattern), shop.old (pattern)")
	if _, err := sc.Exec(ctx, `DROP TABLE shop.old`); err != nil {
		t.Fatal(err)
	}
	waitStatus("shop: released (dropped at the source, destination tables kept): shop.old")
	// Created and filled in one transaction, then changed without pause: rows written before the source sees the
	// table are the copy's, the rest the slot's.
	const n = 60000
	if _, err := sc.Exec(ctx, fmt.Sprintf(`CREATE TABLE shop.orders (id bigint PRIMARY KEY, name text NOT NULL, n bigint NOT NULL);
		INSERT INTO shop.orders SELECT i, 'n' || i, i FROM generate_series(1, %d) i`, n)); err != nil {
		t.Fatal(err)
	}
	stop := startPatternWriter(t, ctx, pgConn(t, ctx, src), n+1)
	waitStatus("re-snapshot of shop.orders: copying")
	bg.Process.Signal(syscall.SIGKILL)
	bg.Wait()
	kills := 4
	e.KillSyncAtRandom(kills, 700*time.Millisecond, 2500*time.Millisecond)
	stop()
	e.MustRun("sync", "--once")

	dc := pgConn(t, ctx, dst)
	harness.SameTable(t, patternRows(t, ctx, sc, "shop.orders"), patternRows(t, ctx, dc, "public.orders"))
	harness.SameTable(t, patternRows(t, ctx, sc, "shop.items"), patternRows(t, ctx, dc, "public.items"))
	var old int
	if err := dc.QueryRow(ctx, `SELECT count(*) FROM public.old`).Scan(&old); err != nil || old != 300 {
		t.Fatalf("the dropped table's destination holds %d rows (%v), want its 300 kept", old, err)
	}
	st := e.MustRun("status", "--json", "shop").Stdout
	if want := `"tables":[{"name":"shop.items","via":"pattern"},{"name":"shop.orders","via":"pattern"}]`; !strings.Contains(strings.Join(strings.Fields(st), ""), want) {
		t.Errorf("status --json lacks %s:\n%s", want, st)
	}
	t.Logf("%d SIGKILLs during the new table's copy; %d rows equal in source and destination", kills+1, n)
}

// startPatternWriter keeps changing shop.orders and shop.items through w — inserts from id next on, updates and
// deletes of random earlier ids, one statement per transaction — until the returned stop is called.
func startPatternWriter(t *testing.T, ctx context.Context, w *pgx.Conn, next int64) (stop func()) {
	writerCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(3, 4))
		for writerCtx.Err() == nil {
			id := 1 + rng.Int64N(next-1)
			var q string
			switch rng.IntN(4) {
			case 0:
				q = fmt.Sprintf(`INSERT INTO shop.orders VALUES (%d, 'new', 0)`, next)
				next++
			case 1:
				q = fmt.Sprintf(`UPDATE shop.orders SET n = n + 1, name = name || '+' WHERE id = %d`, id)
			case 2:
				q = fmt.Sprintf(`DELETE FROM shop.orders WHERE id = %d`, id)
			default:
				q = fmt.Sprintf(`UPDATE shop.items SET name = name || '+' WHERE id = %d`, 1+id%500)
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

// patternRows reads a table's (id, name[, n]) rows as text, by id.
func patternRows(t *testing.T, ctx context.Context, c *pgx.Conn, table string) map[string]string {
	t.Helper()
	rows, err := c.Query(ctx, `SELECT id::text, row_to_json(x)::text FROM (SELECT * FROM `+table+`) x`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, r string
		if err := rows.Scan(&id, &r); err != nil {
			t.Fatal(err)
		}
		out[id] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
