package chaos

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skippr-dev/skippr/test/harness"
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
	harness.CreateOrders(t, ctx, sc, 60000)

	e := harness.NewEnv(t)
	s := src.Server
	e.WriteConfig(fmt.Sprintf(`connections:
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
`, s.Host, s.Port, src.Name, dst.Name, filepath.Join(e.Dir, "wal")))

	stopWriter := harness.StartOrdersWriter(t, ctx, conn(src), 60001)
	kills := 10
	e.KillSyncAtRandom(kills, 500*time.Millisecond, 2500*time.Millisecond)
	stopWriter()
	// Catch up: the source turns idle once the slot has sent everything written so far.
	e.MustRun("sync", "--once")

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
	r := e.MustRun("teardown", "orders")
	if !strings.Contains(r.Stdout, "released replication slot chaos") || !strings.Contains(r.Stdout, "released publication chaos") {
		t.Fatalf("teardown: %s", r.Stdout)
	}
	var slots int
	if err := sc.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'chaos'`).Scan(&slots); err != nil || slots != 0 {
		t.Fatalf("slot chaos still exists after teardown (%d, %v)", slots, err)
	}
}
