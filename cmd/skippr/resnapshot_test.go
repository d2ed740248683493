package main_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// TestPostgresResnapshotWhileStreaming damages a Postgres destination (rows deleted, rows changed, rows the
// source never had), asks for a re-snapshot of the table while a writer keeps inserting, updating and deleting at
// the source, SIGKILLs `skippr sync` at random points of the copy, and then compares the destination with the
// source row by row.
func TestPostgresResnapshotWhileStreaming(t *testing.T) {
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
	const n = 20000
	sc, dc := conn(src), conn(dst)
	createOrders(t, ctx, sc, n)

	e := newEnv(t)
	s := src.Server
	e.writeConfig(fmt.Sprintf(`connections:
  src:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: %[1]s, port: %[2]d, user: postgres, database: %[3]s, sslmode: disable, tables: [public.orders], slot: resnap, publication: resnap, batch_size: 250 }
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
      group_commit: { max_bytes: 64KiB, max_delay: 50ms }
`, s.Host, s.Port, src.Name, dst.Name, filepath.Join(e.dir, "wal")))
	e.mustRun("sync", "--once")

	// What a re-snapshot repairs: rows lost downstream, rows changed downstream, rows the source never had.
	for _, q := range []string{
		`DELETE FROM orders WHERE id % 50 = 0`,
		`UPDATE orders SET name = 'damaged' WHERE id % 77 = 0`,
		`INSERT INTO orders SELECT i, 'stray', 0, ARRAY['z'], '{}', now() FROM generate_series(1000001, 1000300) i`,
	} {
		if _, err := dc.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}

	if r := e.run("resnapshot", "orders", "public.order"); r.code != 2 || !strings.Contains(r.stderr, `did you mean "public.orders"`) {
		t.Fatalf("a misspelt table: exit %d, stderr:\n%s", r.code, r.stderr)
	}
	stop := startOrdersWriter(t, ctx, conn(src), n+1)
	// The request reaches a sync that is already streaming: it restarts its Read with it and drops the request
	// once a checkpoint carrying it is durable. From then on only the source's checkpoint knows about the
	// re-snapshot, so the runs killed below must resume it from there.
	bg := e.cmd(ctx, "sync")
	if err := bg.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	e.mustRun("resnapshot", "orders", "public.orders")
	again := e.mustRun("resnapshot", "--json", "orders", "public.orders")
	if !strings.Contains(again.stdout, `"stream":"public.orders"`) {
		t.Fatalf("resnapshot --json: %s", again.stdout)
	}
	requests := filepath.Join(e.home, "state", "orders-*", "resnapshot", "*.json")
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if left, _ := filepath.Glob(requests); len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the running sync did not take the request")
		}
	}
	bg.Process.Signal(syscall.SIGKILL)
	bg.Wait()
	kills := 5
	e.killSyncAtRandom(kills, 700*time.Millisecond, 2500*time.Millisecond)
	stop()
	r := e.mustRun("sync", "--once")
	if !strings.Contains(r.stderr, "re-snapshot") && !strings.Contains(r.stderr, "resnapshot") {
		t.Logf("final sync stderr:\n%s", r.stderr)
	}
	if left, _ := filepath.Glob(requests); len(left) != 0 {
		t.Fatalf("requests left after the re-snapshot: %v", left)
	}

	dump := func(c *pgx.Conn) []string {
		rows, err := c.Query(ctx, `SELECT id::text || '|' || name || '|' || coalesce(amount::text, '') || '|' || coalesce(tags::text, '') || '|' || coalesce(doc::text, '') FROM orders ORDER BY id`)
		if err != nil {
			t.Fatal(err)
		}
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	want, got := dump(sc), dump(dc)
	for i := range min(len(want), len(got)) {
		if want[i] != got[i] {
			t.Fatalf("row %d differs:\nsource      %s\ndestination %s", i, want[i], got[i])
		}
	}
	if len(want) != len(got) {
		t.Fatalf("source has %d rows, destination %d", len(want), len(got))
	}
	t.Logf("%d SIGKILLs during the re-snapshot; %d rows equal in source and destination", kills, len(want))
}

// TestResnapshotRefusedForIncapableDestination: a destination that cannot apply a re-snapshot makes the request
// fail at once with exit 2, naming it, and nothing is recorded.
func TestResnapshotRefusedForIncapableDestination(t *testing.T) {
	e := newEnv(t)
	gen := `{ seed: 1, rows: 10, stream: orders }`
	e.writeConfig(pipelineConfig(gen, filepath.Join(e.dir, "out"), ", no_resnapshot: true", "file://"+filepath.Join(e.dir, "wal"), ""))
	r := e.run("resnapshot", "orders", "orders")
	if r.code != 2 || !strings.Contains(r.stderr, "destination out cannot apply a re-snapshot") {
		t.Fatalf("exit %d, stderr:\n%s", r.code, r.stderr)
	}
	if reqs, _ := filepath.Glob(filepath.Join(e.home, "state", "*", "resnapshot", "*.json")); len(reqs) != 0 {
		t.Fatalf("a refused request was recorded: %v", reqs)
	}
	if r := e.run("resnapshot", "orders"); r.code != 2 {
		t.Fatalf("no table: exit %d, want 2:\n%s", r.code, r.stderr)
	}
}
