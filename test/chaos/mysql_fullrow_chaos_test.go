package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skippr-dev/skippr/test/harness"
	"github.com/skippr-dev/skippr/testkit/mysqltest"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// TestMySQLKeylessTableFullRow is TestKeylessTableFullRow for a MariaDB source: a keyless table of 50,000 rows
// holding identical rows and NULLs, in mode: full_row, copied beside a keyed table by parallel readers (whose
// snapshots land at different binlog points under the write load) into a Postgres and a DuckDB destination,
// under inserts of duplicates, updates and deletes of one of several identical rows (LIMIT 1) and updates of many
// rows, while sync is SIGKILLed (the first time in bag's copy, then at random): both destinations end as the same
// multiset of rows as the source. Without updates split into delete and insert it fails (the destinations
// refuse an update of a full_row stream).
//
// The first kill is timed by the source's own checkpoint in the WAL: it lands while the last committed
// checkpoint says bag's copy has begun and not ended, so the next run copies bag again under a newer snapshot
// than where streaming starts, and streaming must drop bag's changes up to that snapshot (fullrow.go's copy
// point). Without that drop (inCopy false) this test fails: the transactions between the two snapshots reach
// the destinations twice. The first run's WAL holds back the source (max_unapplied_bytes) so that the committed
// checkpoint moves at the destinations' pace and the kill cannot miss the copy; without it the source copied
// faster than the destinations applied, and a kill timed by the destination's rows landed after the copy.
// 50,000 rows are enough: the first kill no longer needs a long copy to land in it, bag's copy still spans
// a hundred chunks (checkpoints), the copy again after each kill in it takes seconds (so the random kills land
// in copies and in the stream), and an update of many rows still changes a thousand (200,000 rows took 114 s
// on a loaded machine, most of it the destinations applying copies that were then started over).
// No truncate in the load: it would empty the copy, and hide a copy held twice.
func TestMySQLKeylessTableFullRow(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	srv, err := mysqltest.Start(ctx, mysqltest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	src, err := sql.Open("mysql", srv.DSN("", "root", ""))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	for _, q := range []string{
		"CREATE DATABASE shop",
		"CREATE TABLE shop.bag (a int, b varchar(40), n int)",
		"INSERT INTO shop.bag SELECT seq % 50, concat('v', seq % 7), NULLIF(seq % 4, 0) FROM shop.seq_1_to_50000",
		"INSERT INTO shop.bag VALUES (NULL, NULL, NULL), (NULL, NULL, NULL), (1, '', NULL)",
		"CREATE TABLE shop.items (id int PRIMARY KEY, sku varchar(20) NOT NULL)",
		"INSERT INTO shop.items SELECT seq, concat('sku', seq) FROM shop.seq_1_to_20000",
	} {
		if _, err := src.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	dst := pgtest.NewDB(t)
	e := harness.NewEnvWith(t, "mysql", "postgres", "duckdb")
	duck := fmt.Sprintf(`{"path": %q}`, filepath.Join(e.Dir, "dest", "bag.duckdb"))
	walDir := filepath.Join(e.Dir, "wal")
	// config writes the pipeline; held says the WAL holds the source back to the destinations' pace.
	config := func(held bool) {
		hold := ""
		if held {
			hold = "\n      " + harness.HeldWAL
		}
		e.WriteConfig(fmt.Sprintf(`connections:
  src:
    plugin: mysql
    version: "~> 0.1"
    settings:
      host: %[1]s
      port: %[2]d
      user: root
      database: shop
      tables: [items, bag]
      batch_size: 500
      snapshot_parallel: 2
      table_options: { bag: { mode: full_row } }
  dst:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: %[3]s, port: %[4]d, user: postgres, database: %[5]s, sslmode: disable }
  duck:
    plugin: duckdb
    version: "~> 0.1"
    settings: %[6]s
pipelines:
  bag:
    source: src
    destinations: [dst, duck]
    wal:
      url: file://%[7]s%[8]s
`, srv.Host, srv.Port, dst.Server.Host, dst.Server.Port, dst.Name, duck, walDir, hold))
	}
	config(true)

	// The write load, beside syncs that are SIGKILLed at random.
	load := make(chan struct{})
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
			var q string
			switch k := rng.IntN(100); {
			case k < 30:
				q = fmt.Sprintf(`INSERT INTO shop.bag VALUES (%d, 'v%d', NULL), (%d, 'v%d', NULL), (NULL, NULL, 2)`, a, a%7, a, a%7)
			case k < 55:
				q = fmt.Sprintf(`UPDATE shop.bag SET n = coalesce(n, 0) + 1 WHERE a = %d LIMIT 1`, a)
			case k < 80:
				q = fmt.Sprintf(`DELETE FROM shop.bag WHERE a = %d LIMIT 1`, a)
			case k < 85:
				q = fmt.Sprintf(`UPDATE shop.bag SET a = %d WHERE a = %d`, rng.IntN(50), a)
			case k < 90:
				q = fmt.Sprintf(`UPDATE shop.items SET sku = 'u%d' WHERE id = %d`, writes, rng.IntN(20000)+1)
			default:
				q = fmt.Sprintf(`BEGIN; INSERT INTO shop.bag VALUES (%d, 'tx', 1), (%d, 'tx', 1); DELETE FROM shop.bag WHERE a = %d LIMIT 1; UPDATE shop.bag SET b = NULL WHERE a = %d LIMIT 1; COMMIT`, a, a, a, a)
			}
			if _, err := src.ExecContext(ctx, q); err != nil {
				t.Errorf("load: %s: %v", q, err)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	// The first kill lands in bag's copy (see above); the WAL held the source back for it, and no longer does.
	e.KillSyncInCopy(walDir, "bag")
	config(false)
	e.KillSyncAtRandom(3, time.Second, 6*time.Second)
	close(load)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	e.MustRun("sync", "--once")

	var want []string
	rows, err := src.QueryContext(ctx, `SELECT concat(coalesce(a, '-'), '|', coalesce(b, '-'), '|', coalesce(n, '-')) FROM shop.bag`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		want = append(want, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(want)

	pc, err := pgx.Connect(ctx, dst.ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close(context.Background())
	pr, err := pc.Query(ctx, `SELECT coalesce(a::text, '-') || '|' || coalesce(b, '-') || '|' || coalesce(n::text, '-') FROM bag`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(pr, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	sameBag(t, "Postgres", got, want)
	sameBag(t, "DuckDB", duckBagRows(t, duck, "shop.bag"), want)
	t.Logf("%d writes under 4 SIGKILLs (the first in bag's copy); %d rows equal as multisets in source, Postgres and DuckDB", writes, len(want))
}
