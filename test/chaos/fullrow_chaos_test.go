package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skippr-dev/skippr/test/harness"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// A keyless table of 200,000 rows holding identical rows and NULLs, in mode: full_row (REPLICA IDENTITY FULL): refused at start
// without REPLICA IDENTITY FULL, and refused naming the lake when an Iceberg destination is in the pipeline.
// Then, into a Postgres and a DuckDB destination, its snapshot and a write load of inserts of duplicates,
// updates and deletes of one of several identical rows, updates of many rows and a truncate, while sync is
// SIGKILLed at random (in the copy and in the stream): both destinations end as the same multiset of rows as
// the source.
func TestKeylessTableFullRow(t *testing.T) {
	src, dst := pgtest.NewDB(t), pgtest.NewDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	sc, dc := src.Connect(t), dst.Connect(t)
	exec := func(c *pgx.Conn, sql string) {
		t.Helper()
		if _, err := c.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(sc, `CREATE TABLE bag (a int, b text, n numeric);
		INSERT INTO bag SELECT i % 50, 'v' || (i % 7), NULLIF(i % 4, 0) * 1.5 FROM generate_series(1, 200000) i;
		INSERT INTO bag VALUES (NULL, NULL, NULL), (NULL, NULL, NULL), (1, '', NULL)`)

	e := harness.NewEnvWith(t, "postgres", "duckdb", "iceberg")
	duck := fmt.Sprintf(`{"path": %q}`, filepath.Join(e.Dir, "dest", "bag.duckdb"))
	config := func(dests string) {
		s := src.Server
		e.WriteConfig(fmt.Sprintf(`connections:
  src:
    plugin: postgres
    version: "~> 0.1"
    settings:
      host: %[1]s
      port: %[2]d
      user: postgres
      database: %[3]s
      sslmode: disable
      tables: [public.bag]
      slot: fullrow
      publication: fullrow
      table_options: { public.bag: { mode: full_row } }
  dst:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: %[1]s, port: %[2]d, user: postgres, database: %[4]s, sslmode: disable }
  duck:
    plugin: duckdb
    version: "~> 0.1"
    settings: %[6]s
  lake:
    plugin: iceberg
    version: "~> 0.1"
    settings: %[7]s
pipelines:
  bag:
    source: src
    destinations: [%[8]s]
    wal:
      url: file://%[5]s
`, s.Host, s.Port, src.Name, dst.Name, filepath.Join(e.Dir, "wal"), duck, harness.KeylessLakeSettings(e), dests))
	}
	refused := func(want ...string) {
		t.Helper()
		r := e.Run("sync", "--once")
		if r.Code != 2 {
			t.Fatalf("sync --once: exit %d, want 2\n%s", r.Code, r.Stderr)
		}
		for _, w := range want {
			if !strings.Contains(r.Stderr, w) {
				t.Fatalf("sync --once stderr lacks %q:\n%s", w, r.Stderr)
			}
		}
	}
	config("dst, duck")
	refused("table public.bag is in mode: full_row", `ALTER TABLE "public"."bag" REPLICA IDENTITY FULL`)
	exec(sc, `ALTER TABLE bag REPLICA IDENTITY FULL`)
	config("dst, lake, duck")
	refused("table public.bag is keyless and matched by full row (mode: full_row), which destination lake cannot apply", "mode: append")

	config("dst, duck")
	// The write load, beside syncs that are SIGKILLed at random.
	load, lc := make(chan struct{}), src.Connect(t)
	var wg sync.WaitGroup
	var writes int
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
		for ; ; writes++ {
			select {
			case <-load:
				return
			default:
			}
			a := rng.IntN(50)
			one := fmt.Sprintf(`(SELECT ctid FROM bag WHERE a IS NOT DISTINCT FROM %d LIMIT 1)`, a)
			var sql string
			switch k := rng.IntN(100); {
			case writes == 150:
				sql = `BEGIN; TRUNCATE bag; INSERT INTO bag SELECT i % 50, 'after', NULL FROM generate_series(1, 3000) i; COMMIT`
			case k < 30:
				sql = fmt.Sprintf(`INSERT INTO bag VALUES (%d, 'v%d', NULL), (%d, 'v%d', NULL), (NULL, NULL, 2.5)`, a, a%7, a, a%7)
			case k < 55:
				sql = `UPDATE bag SET b = b || 'u', n = 1.25 WHERE ctid = ` + one
			case k < 80:
				sql = `DELETE FROM bag WHERE ctid = ` + one
			case k < 90:
				sql = fmt.Sprintf(`UPDATE bag SET a = %d WHERE a = %d`, rng.IntN(50), a)
			default:
				sql = fmt.Sprintf(`BEGIN; INSERT INTO bag VALUES (%d, 'tx', 1), (%d, 'tx', 1); DELETE FROM bag WHERE ctid = %s; UPDATE bag SET b = NULL WHERE ctid = %s; COMMIT`, a, a, one, one)
			}
			if _, err := lc.Exec(ctx, sql); err != nil {
				t.Errorf("load: %s: %v", sql, err)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	e.KillSyncAtRandom(4, time.Second, 6*time.Second)
	close(load)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	e.MustRun("sync", "--once")

	const text = `coalesce(a::text, '-') || '|' || coalesce(b, '-') || '|' || coalesce(n::text, '-')`
	dump := func(c *pgx.Conn) []string {
		rows, err := c.Query(ctx, `SELECT `+text+` FROM bag`)
		if err != nil {
			t.Fatal(err)
		}
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(out)
		return out
	}
	want := dump(sc)
	sameBag(t, "Postgres", dump(dc), want)
	sameBag(t, "DuckDB", duckBagRows(t, duck, "public.bag"), want)
	t.Logf("%d writes under 4 SIGKILLs; %d rows equal as multisets in source, Postgres and DuckDB", writes, len(want))
}

// duckBagRows reads a full_row test table (columns a, b, n) from a DuckDB destination as "a|b|n" lines, NULL as
// "-", sorted: a multiset to compare with the source's.
func duckBagRows(t *testing.T, settings, stream string) []string {
	t.Helper()
	n := 0
	var rows []string
	for _, r := range harness.PluginRows(t, "duckdb", "dump", settings, stream, "the DuckDB table", func([]byte, map[string]any) string {
		n++
		return fmt.Sprint(n)
	}) {
		str := func(k string) string {
			if r[k] == nil {
				return "-"
			}
			return fmt.Sprint(r[k])
		}
		rows = append(rows, str("a")+"|"+str("b")+"|"+str("n"))
	}
	slices.Sort(rows)
	return rows
}

// sameBag fails the test when a destination's rows (sorted) are not the source's as a multiset, naming both
// differences.
func sameBag(t *testing.T, dest string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s destination: %d rows, source %d; rows it lacks %v; rows it should not have %v", dest, len(got), len(want), harness.Missing(want, got), harness.Missing(got, want))
	}
}
