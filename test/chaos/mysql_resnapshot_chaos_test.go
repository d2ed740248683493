package chaos

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skippr-dev/skippr/test/harness"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// TestMySQLResnapshotWhileStreaming is TestResnapshotWhileStreaming (test/e2e) for a MariaDB source into Postgres:
// the destination is damaged (rows deleted, rows changed, rows the source never had), rows are deleted at the
// source without the binary log (sql_log_bin = 0, as a change the pipeline never saw), then a re-snapshot of
// shop.orders is asked of a running sync while a writer inserts, updates (some keys too) and deletes; `skippr sync`
// is SIGKILLed at random points of the copy, and at the end the destination must equal the source row by row.
// Without the watermark filtering (chunk rows changed between the marks dropped) it fails: a chunk's stale copy of
// a row would overwrite the change the binary log sent before it.
func TestMySQLResnapshotWhileStreaming(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	m := harness.NewMySQLChaos(t, ctx, "bigint")
	dst := pgtest.NewDB(t)
	e := m.E
	e.WriteConfig(fmt.Sprintf(`connections:
  src:
    plugin: mysql
    version: "~> 0.1"
    settings: { host: %[1]s, port: %[2]d, user: root, database: shop, tables: [orders, items], batch_size: 500 }
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
      group_commit: { max_bytes: 64KiB, max_delay: 50ms }
`, m.Srv.Host, m.Srv.Port, dst.Server.Host, dst.Server.Port, dst.Name, filepath.Join(e.Dir, "wal")))
	// 300000 rows: a copy long enough for the kills below to land in it.
	if _, err := m.Src.ExecContext(ctx, "INSERT INTO shop.orders SELECT seq, concat('n', seq), seq * 1.25, seq * 1000 FROM shop.seq_60001_to_300000"); err != nil {
		t.Fatal(err)
	}
	e.MustRun("sync", "--once")

	pc, err := pgx.Connect(ctx, dst.ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close(context.Background())
	for _, q := range []string{
		`DELETE FROM orders WHERE id % 50 = 0`,
		`UPDATE orders SET name = 'damaged' WHERE id % 77 = 0`,
		`INSERT INTO orders (id, name, amount, n) SELECT i, 'stray', 0, 0 FROM generate_series(1000001, 1000300) i`,
	} {
		if _, err := pc.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	// Rows the source loses without a word in the binary log: only the re-snapshot's end removes them downstream.
	c, err := m.Src.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"SET SESSION sql_log_bin = 0", "DELETE FROM shop.orders WHERE id % 97 = 0", "SET SESSION sql_log_bin = 1"} {
		if _, err := c.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	c.Close()

	stopWriter := harness.StartMySQLWriter(t, ctx, m.Src, 300001, "1")
	// The random writer seldom hits a chunk between its select and its high watermark. This one does, in every
	// stretch of the table at once: each statement bumps n of one id in 1000 (about one row per two chunks), and
	// a row is bumped once per 1000 statements, so a stale chunk copy of it is not repaired by a later change.
	stopHot := startHotWriter(t, ctx, m.Src)
	stop := func() { stopHot(); stopWriter() }
	bg := e.Cmd(ctx, "sync")
	var bgErr bytes.Buffer
	bg.Stderr = &bgErr
	if err := bg.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	e.MustRun("resnapshot", "orders", "shop.orders")
	requests := filepath.Join(e.Home, "state", "orders-*", "resnapshot", "*.json")
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if left, _ := filepath.Glob(requests); len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			bg.Process.Signal(syscall.SIGKILL)
			bg.Wait()
			t.Fatalf("the running sync did not take the request; its stderr:\n%s", bgErr.String())
		}
	}
	bg.Process.Signal(syscall.SIGKILL)
	bg.Wait()
	if st := e.MustRun("status", "orders").Stdout; !strings.Contains(st, "re-snapshot of shop.orders: copying") {
		t.Fatalf("status at the first kill, just after the copy began:\n%s", st)
	}
	kills := 5
	e.KillSyncAtRandom(kills, 700*time.Millisecond, 2500*time.Millisecond)
	stop()
	e.MustRun("sync", "--once")
	if left, _ := filepath.Glob(requests); len(left) != 0 {
		t.Fatalf("requests left after the re-snapshot: %v", left)
	}

	want := m.Rows("SELECT id, concat(name, '|', coalesce(amount, ''), '|', coalesce(n, '')) FROM shop.orders")
	rows, err := pc.Query(ctx, `SELECT id::text, name || '|' || coalesce(amount::text, '') || '|' || coalesce(n::text, '') FROM orders`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for rows.Next() {
		var id, s string
		if err := rows.Scan(&id, &s); err != nil {
			t.Fatal(err)
		}
		got[id] = s
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	harness.SameTable(t, want, got)
	t.Logf("%d SIGKILLs during the re-snapshot; %d rows equal in source and destination", kills, len(want))

	// Removing the pipeline deletes its watermark row; the table stays for other pipelines.
	if n := len(m.Rows("SELECT reader, mark FROM shop.skippr_watermarks")); n != 1 {
		t.Fatalf("watermark rows before teardown: %d, want this pipeline's one", n)
	}
	if r := e.MustRun("teardown", "orders"); !strings.Contains(r.Stdout, "released watermark row of reader ") {
		t.Fatalf("teardown: %s", r.Stdout)
	}
	if n := len(m.Rows("SELECT reader, mark FROM shop.skippr_watermarks")); n != 0 {
		t.Fatalf("watermark rows after teardown: %d, want none", n)
	}
}

// startHotWriter runs UPDATE shop.orders SET n = n + 1 WHERE id % 1000 = k for k = 0, 1, 2, … until stopped.
func startHotWriter(t *testing.T, ctx context.Context, w *sql.DB) (stop func()) {
	hotCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for k := 0; hotCtx.Err() == nil; k++ {
			if _, err := w.ExecContext(hotCtx, fmt.Sprintf("UPDATE shop.orders SET n = n + 1 WHERE id %% 1000 = %d", k%1000)); err != nil && hotCtx.Err() == nil {
				t.Errorf("hot writer: %v", err)
				return
			}
			time.Sleep(3 * time.Millisecond)
		}
	}()
	return func() { cancel(); <-done }
}
