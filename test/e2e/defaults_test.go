package e2e

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

// TestPostgresAddColumnDefaultIntoIcebergV3: PostgreSQL's ADD COLUMN … DEFAULT fills the existing rows in its
// catalog only (no change is logged for them); into an Iceberg format v3 lake the column gets the value as its
// initial-default, so `skippr query --as-of-lake` (DuckDB over the data files, by the plan) answers exactly as
// the source: old rows hold the value, a row set to NULL afterwards and a row inserted with NULL stay NULL.
// Without the initial-default (or without the plan carrying it to DuckDB) the old rows read NULL.
func TestPostgresAddColumnDefaultIntoIcebergV3(t *testing.T) { addColumnDefaultIntoIceberg(t, 3) }

// TestPostgresAddColumnDefaultIntoIcebergV2: the same into a format v2 lake (no initial-default), where the
// plugin rewrites the table's data files with the value in the schema change's commit: DuckDB reads the
// values from the files. Without the rewrite the old rows read NULL.
func TestPostgresAddColumnDefaultIntoIcebergV2(t *testing.T) { addColumnDefaultIntoIceberg(t, 2) }

func addColumnDefaultIntoIceberg(t *testing.T, formatVersion int) {
	src := pgtest.NewDB(t)
	e := harness.NewEnv(t) // builds skippr and the plugins first: on a loaded machine that takes minutes
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	pg := src.Connect(t)
	exec := func(q string) {
		t.Helper()
		if _, err := pg.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(`CREATE TABLE orders (id bigint PRIMARY KEY, name text NOT NULL)`)
	exec(`INSERT INTO orders SELECT i, 'n' || i FROM generate_series(1, 50) i`)

	e.WriteConfig(fmt.Sprintf(`connections:
  src:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: %[1]s, port: %[2]d, user: postgres, database: %[3]s, sslmode: disable, tables: [public.orders], slot: d, publication: d }
  lake:
    plugin: iceberg
    version: "~> 0.1"
    settings: { catalog: { warehouse: %[4]s }, namespace: shop, tables: { public.orders: orders }, format_version: %[6]d }
pipelines:
  orders:
    source: src
    destinations: [lake]
    wal:
      url: file://%[5]s
`, src.Server.Host, src.Server.Port, src.Name, filepath.Join(e.Dir, "lake"), filepath.Join(e.Dir, "wal"), formatVersion))
	e.MustRun("sync", "--once") // the snapshot

	exec(`ALTER TABLE orders ADD COLUMN grade int DEFAULT 7, ADD COLUMN label text DEFAULT 'it''s old', ADD COLUMN day date DEFAULT '2020-01-02'`)
	exec(`UPDATE orders SET grade = NULL, label = NULL WHERE id = 5`)
	exec(`INSERT INTO orders (id, name, grade, label, day) VALUES (100, 'new', NULL, 'fresh', NULL)`)
	q := `SELECT id, name, grade, label, CAST(day AS text) AS day FROM orders ORDER BY id`
	want := harness.PgJSON(t, ctx, pg, q)
	// The changes are read once their WAL commit is decoded: sync again until the lake holds them.
	var got []any
	for deadline := time.Now().Add(3 * time.Minute); ; {
		e.MustRun("sync", "--once")
		if got = e.QueryJSON(q, true); reflect.DeepEqual(got, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("skippr query --as-of-lake:\n%s\nsource:\n%s", harness.Show(got), harness.Show(want))
		}
		time.Sleep(200 * time.Millisecond)
	}
}
