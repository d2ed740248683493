package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/test/harness"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// Issue #28 item 3, through `skippr sync --once` from a real Postgres into a Postgres and a DuckDB destination:
// ADD COLUMN added int DEFAULT 42, then an insert, an update, a DROP COLUMN of another column and an ALTER
// COLUMN … TYPE bigint, each its own transaction, all before the next sync. The rows untouched since hold 42 at
// the source, and must in both destinations. The one sync writes rows, then alters the table (DuckDB: a range
// that needs splitting), then writes again.
func TestAddColumnDefaultThenRewriteFromPostgres(t *testing.T) {
	src := pgtest.NewDB(t)
	dst := src.Server.NewDB(t)
	src.Exec(t, `CREATE TABLE t (id int PRIMARY KEY, a int, b text); INSERT INTO t SELECT g, g, 'b' || g FROM generate_series(1, 4) g`)
	s := src.Server
	e := harness.NewEnvWith(t, "postgres", "duckdb")
	duck := fmt.Sprintf(`{"path": %q}`, filepath.Join(e.Dir, "dest", "t.duckdb"))
	e.WriteConfig(fmt.Sprintf(`connections:
  src:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: %[1]s, port: %[2]d, user: postgres, database: %[3]s, sslmode: disable, tables: [public.t], slot: adddef, publication: adddef }
  pg:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: %[1]s, port: %[2]d, user: postgres, database: %[4]s, sslmode: disable, schema: out }
  duck:
    plugin: duckdb
    version: "~> 0.1"
    settings: %[5]s
pipelines:
  t:
    source: src
    destinations: [pg, duck]
    wal:
      url: file://%[6]s
`, s.Host, s.Port, src.Name, dst.Name, duck, filepath.Join(e.Dir, "wal")))
	e.MustRun("sync", "--once")
	for _, q := range []string{
		`ALTER TABLE t ADD COLUMN added int DEFAULT 42`,
		`INSERT INTO t VALUES (5, 5, 'b5', 7)`,
		`UPDATE t SET a = 10 WHERE id = 1`,
		`ALTER TABLE t DROP COLUMN b`,
		`ALTER TABLE t ALTER COLUMN added TYPE bigint`,
		`UPDATE t SET a = 20 WHERE id = 2`,
	} {
		src.Exec(t, q)
	}
	e.MustRun("sync", "--once")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	want := queryRows(t, ctx, src, `SELECT id, a, added FROM public.t ORDER BY id`)
	if !slices.Equal(want, []string{"1|10|42", "2|20|42", "3|3|42", "4|4|42", "5|5|7"}) {
		t.Fatalf("source: %v", want)
	}
	if got := queryRows(t, ctx, dst, `SELECT id, a, added FROM out.t ORDER BY id`); !slices.Equal(got, want) {
		t.Errorf("postgres destination: %v, want %v", got, want)
	}
	var got []string
	for _, r := range harness.DumpDuckDB(t, duck, "public.t") {
		got = append(got, fmt.Sprintf("%v|%v|%v", r["id"], r["a"], r["added"]))
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("duckdb destination: %v, want %v", got, want)
	}
}

// queryRows returns a query's rows, each as its columns' text joined by "|".
func queryRows(t *testing.T, ctx context.Context, db *pgtest.DB, q string) []string {
	t.Helper()
	rows, err := pgConn(t, ctx, db).Query(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			t.Fatal(err)
		}
		s := ""
		for i, v := range vals {
			if i > 0 {
				s += "|"
			}
			s += fmt.Sprint(v)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
