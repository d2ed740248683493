package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/test/harness"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// A real Postgres source into Iceberg with soft_delete and metadata columns, and history for its table through
// table_options: `skippr query` hides the soft-deleted rows and --include-deleted shows them flagged with their
// last values; a delete still in the WAL hides its row either way until it is applied; items_history holds
// every change in order.
func TestIcebergSoftDeleteQuery(t *testing.T) {
	src := pgtest.NewDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	src.Exec(t, `CREATE TABLE items (id int PRIMARY KEY, v text); INSERT INTO items SELECT g, 'v' || g FROM generate_series(1, 5) g`)
	e := harness.NewEnvWith(t, "postgres", "iceberg", "duckdb")
	config := func(paused bool) {
		e.WriteConfig(fmt.Sprintf(`connections:
  src:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: %[1]s, port: %[2]d, user: postgres, database: %[3]s, sslmode: disable, tables: [public.items], slot: isd, publication: isd }
  lake:
    plugin: iceberg
    version: "~> 0.1"
    settings:
      catalog: { warehouse: %[4]s }
      namespace: shop
      tables: { public.items: items }
      soft_delete: true
      metadata_columns: [op, position]
      table_options: { public.items: { history: true } }
pipelines:
  items:
    source: src
    destinations: [lake]
    apply: { paused: %[6]v }
    wal:
      url: file://%[5]s
      group_commit: { max_bytes: 1MiB, max_delay: 50ms }
`, src.Server.Host, src.Server.Port, src.Name, filepath.Join(e.Dir, "lake"), filepath.Join(e.Dir, "wal"), paused))
	}
	config(false)
	e.MustRun("sync", "--once") // the snapshot
	src.Exec(t, `UPDATE items SET v = 'v2b' WHERE id = 2; DELETE FROM items WHERE id IN (1, 3)`)
	e.MustRun("sync", "--once")

	const q = `SELECT id, v, _skippr_deleted AS d, _skippr_op AS op FROM shop.items ORDER BY id`
	query := func(args ...string) string {
		t.Helper()
		return harness.Show(harness.DecodeLines(t, e.MustRun(append([]string{"query", "--json"}, append(args, q)...)...).Stdout))
	}
	live := `[{"d":false,"id":2,"op":"update","v":"v2b"},{"d":false,"id":4,"op":"snapshot","v":"v4"},{"d":false,"id":5,"op":"snapshot","v":"v5"}]`
	all := `[{"d":true,"id":1,"op":"delete","v":"v1"},{"d":false,"id":2,"op":"update","v":"v2b"},{"d":true,"id":3,"op":"delete","v":"v3"},{"d":false,"id":4,"op":"snapshot","v":"v4"},{"d":false,"id":5,"op":"snapshot","v":"v5"}]`
	if got := query(); got != live {
		t.Fatalf("skippr query:\n got %s\nwant %s", got, live)
	}
	if got := query("--include-deleted"); got != all {
		t.Fatalf("skippr query --include-deleted:\n got %s\nwant %s", got, all)
	}
	hist := harness.Show(e.QueryJSON(`SELECT id, v, _skippr_op AS op FROM shop.items_history ORDER BY _skippr_position, _skippr_seq`, true))
	wantHist := `[{"id":1,"op":"snapshot","v":"v1"},{"id":2,"op":"snapshot","v":"v2"},{"id":3,"op":"snapshot","v":"v3"},{"id":4,"op":"snapshot","v":"v4"},{"id":5,"op":"snapshot","v":"v5"},` +
		`{"id":2,"op":"update","v":"v2b"},{"id":1,"op":"delete","v":null},{"id":3,"op":"delete","v":null}]`
	if hist != wantHist {
		t.Fatalf("items_history:\n got %s\nwant %s", hist, wantHist)
	}

	// A delete in the WAL, not applied: its row is hidden both ways.
	config(true)
	syncCtx, stopSync := context.WithCancel(ctx)
	defer stopSync()
	sync := e.Cmd(syncCtx, "sync")
	if err := sync.Start(); err != nil {
		t.Fatal(err)
	}
	src.Exec(t, `DELETE FROM items WHERE id = 4`)
	pendingLive := `[{"d":false,"id":2,"op":"update","v":"v2b"},{"d":false,"id":5,"op":"snapshot","v":"v5"}]`
	harness.WaitFor(t, 60*time.Second, func() bool { return query() == pendingLive })
	pendingAll := `[{"d":true,"id":1,"op":"delete","v":"v1"},{"d":false,"id":2,"op":"update","v":"v2b"},{"d":true,"id":3,"op":"delete","v":"v3"},{"d":false,"id":5,"op":"snapshot","v":"v5"}]`
	if got := query("--include-deleted"); got != pendingAll {
		t.Fatalf("skippr query --include-deleted with a delete in the WAL:\n got %s\nwant %s", got, pendingAll)
	}
	sync.Process.Signal(syscall.SIGTERM)
	sync.Wait()
	config(false)
	e.MustRun("sync", "--once")
	applied := `[{"d":true,"id":1,"op":"delete","v":"v1"},{"d":false,"id":2,"op":"update","v":"v2b"},{"d":true,"id":3,"op":"delete","v":"v3"},{"d":true,"id":4,"op":"delete","v":"v4"},{"d":false,"id":5,"op":"snapshot","v":"v5"}]`
	if got := query("--include-deleted", "--as-of-lake"); got != applied {
		t.Fatalf("once applied, skippr query --include-deleted --as-of-lake:\n got %s\nwant %s", got, applied)
	}
	if got := query(); got != pendingLive {
		t.Fatalf("once applied, skippr query:\n got %s\nwant %s", got, pendingLive)
	}
}
