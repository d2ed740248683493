package chaos

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/test/harness"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// TestPostgresToIcebergSurvivesSIGKILL runs Postgres → Iceberg while a writer changes the source, SIGKILLs the
// engine during the snapshot and during streaming, then compares the lake (alone, --as-of-lake) with the source
// row by row through the same SQL, and checks that no key is held twice.
func TestPostgresToIcebergSurvivesSIGKILL(t *testing.T) {
	src := pgtest.NewDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	pg := src.Connect(t)
	harness.CreateOrders(t, ctx, pg, 40000)
	e := harness.NewEnv(t)
	e.WriteConfig(fmt.Sprintf(`connections:
  src:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: %[1]s, port: %[2]d, user: postgres, database: %[3]s, sslmode: disable, tables: [public.orders], slot: ice, publication: ice, batch_size: 2000 }
  lake:
    plugin: iceberg
    version: "~> 0.1"
    settings: { catalog: { warehouse: %[4]s }, namespace: lake, tables: { public.orders: orders } }
pipelines:
  orders:
    source: src
    destinations: [lake]
    wal:
      url: file://%[5]s
      group_commit: { max_bytes: 256KiB, max_delay: 50ms }
`, src.Server.Host, src.Server.Port, src.Name, filepath.Join(e.Dir, "lake"), filepath.Join(e.Dir, "wal")))
	stopWriter := harness.StartOrdersWriter(t, ctx, src.Connect(t), 40001)
	kills := 8
	e.KillSyncAtRandom(kills, 500*time.Millisecond, 3*time.Second)
	stopWriter()
	e.MustRun("sync", "--once")

	// Timestamps compare as microseconds since the epoch: the two print them differently.
	got := e.QueryJSON(`SELECT id, name, amount, tags, doc::json->>'u' AS u, doc::json->>'new' AS fresh, epoch_us("at") AS at FROM orders ORDER BY id`, true)
	want := harness.PgJSON(t, ctx, pg, `SELECT id, name, amount, tags, doc->>'u' AS u, doc->>'new' AS fresh, (extract(epoch FROM at) * 1000000)::bigint AS at FROM orders ORDER BY id`)
	if len(got) != len(want) {
		t.Fatalf("the lake has %d rows, the source %d", len(got), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Fatalf("row %d differs:\nlake   %s\nsource %s", i, harness.Show(got[i:i+1]), harness.Show(want[i:i+1]))
		}
	}
	if dup := e.QueryJSON(`SELECT id, count(*) AS n FROM orders GROUP BY id HAVING count(*) > 1`, true); len(dup) != 0 {
		t.Fatalf("keys held twice in the lake: %s", harness.Show(dup))
	}
	t.Logf("%d SIGKILLs during snapshot and streaming; the lake's %d rows equal the source's", kills, len(got))
}
