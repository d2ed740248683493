package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/skippr-dev/skippr/test/harness"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// retryableCodes are the gRPC codes a client of `skippr serve` may get, with a message saying to retry, while
// the pipeline beside it is killed and restarted: the statement said nothing about the data. Any other error
// fails the test, and so does any answer that is not the source's state after some prefix of its committed
// changes.
var retryableCodes = []codes.Code{codes.Unavailable, codes.Aborted}

// TestServeBesideSIGKILLedSync runs `skippr serve` on the config of a Postgres → Iceberg pipeline whose
// `skippr sync` is SIGKILLed at random moments and restarted, while a writer inserts rows and updates them, and
// concurrent Flight SQL clients ask count, sums and point lookups all along (issue #30: serve never takes the
// WAL writer's lock and survives the pipeline's restarts and reclaims). The write load makes every answer
// checkable: ids are inserted in order with a = b = id, and an update moves one unit from b to a (a + b stays
// 2·id), so an aggregate answer names the prefix it saw — count n, distinct ids n, max id n, sum of ids
// n(n+1)/2, sum of a+b n(n+1) — and a row held twice (lake and WAL overlapping) or a gap shows. The prefix never
// goes backwards: a lookup of an id an earlier answer already counted must find it. After 200 inserts the writer
// adds a column, so the statements also merge WAL entries (and lake files) of two schemas. At the end serve's rows
// equal the source's exactly. Both WAL backends: a local directory, and a bucket of a real S3-compatible
// server (versitygw), whose lease the restarts take over from the killed writer. SKIPPR_CHAOS_KILLS sets the
// SIGKILLs per backend (default 4: the test's wall time stays near 90 s).
func TestServeBesideSIGKILLedSync(t *testing.T) {
	for _, backend := range []string{"local", "s3"} {
		t.Run(backend, func(t *testing.T) { serveBesideSIGKILLedSync(t, backend) })
	}
}

const serveChaosInitial = 3000 // rows in the source before the first sync

func serveBesideSIGKILLedSync(t *testing.T, backend string) {
	src := pgtest.NewDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pg := src.Connect(t)
	for _, q := range []string{
		`CREATE TABLE ledger (id bigint PRIMARY KEY, a bigint NOT NULL, b bigint NOT NULL)`,
		fmt.Sprintf(`INSERT INTO ledger SELECT i, i, i FROM generate_series(1, %d) i`, serveChaosInitial),
	} {
		if _, err := pg.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	e := harness.NewEnvWith(t, "postgres", "iceberg", "duckdb")
	walURL, walExtra := "file://"+filepath.Join(e.Dir, "wal"), ""
	if backend == "s3" {
		b := harness.Versity.Get(t).NewBucket(t)
		walURL = "s3://" + b.Name + "/wal"
		walExtra = fmt.Sprintf("      s3: { endpoint: %s, region: us-east-1, path_style: true }\n", b.Endpoint)
		e.ExtraEnv = []string{"AWS_ACCESS_KEY_ID=" + b.AccessKey, "AWS_SECRET_ACCESS_KEY=" + b.SecretKey}
	}
	slot := "servechaos_" + backend
	// Small entries, applied and reclaimed one by one: many reclaims for the queries to run into.
	e.WriteConfig(fmt.Sprintf(`connections:
  src:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: %[1]s, port: %[2]d, user: postgres, database: %[3]s, sslmode: disable, tables: [public.ledger], slot: %[4]s, publication: %[4]s, batch_size: 500 }
  lake:
    plugin: iceberg
    version: "~> 0.1"
    settings: { catalog: { warehouse: %[5]s }, namespace: lake, tables: { public.ledger: ledger } }
pipelines:
  ledger:
    source: src
    destinations: [lake]
    wal:
      url: %[6]s
      group_commit: { max_bytes: 16KiB, max_delay: 20ms }
%[7]s`, src.Server.Host, src.Server.Port, src.Name, slot, filepath.Join(e.Dir, "lake"), walURL, walExtra))
	e.MustRun("sync", "--once") // the snapshot is in the lake: every statement from here has a table to read
	serve := e.StartServe(ctx, nil)

	// The writer: ids 1..inserted are committed in the source.
	var inserted atomic.Int64
	inserted.Store(serveChaosInitial)
	writerCtx, stopWriter := context.WithCancel(ctx)
	var writer sync.WaitGroup
	writer.Add(1)
	w := src.Connect(t)
	go func() {
		defer writer.Done()
		rng := rand.New(rand.NewPCG(7, 11))
		for writerCtx.Err() == nil {
			n := inserted.Load() + 1
			if _, err := w.Exec(writerCtx, `INSERT INTO ledger VALUES ($1, $1, $1)`, n); err != nil {
				if writerCtx.Err() == nil {
					t.Errorf("writer: %v", err)
				}
				return
			}
			inserted.Store(n)
			if n == serveChaosInitial+200 {
				// A schema change in the middle: the WAL then holds entries of two schemas, and so may the lake.
				if _, err := w.Exec(writerCtx, `ALTER TABLE ledger ADD COLUMN note text`); err != nil {
					if writerCtx.Err() == nil {
						t.Errorf("writer: %v", err)
					}
					return
				}
			}
			if rng.IntN(2) == 0 {
				if _, err := w.Exec(writerCtx, `UPDATE ledger SET a = a + 1, b = b - 1 WHERE id = $1`, 1+rng.Int64N(n)); err != nil {
					if writerCtx.Err() == nil {
						t.Errorf("writer: %v", err)
					}
					return
				}
			}
			time.Sleep(3 * time.Millisecond)
		}
	}()

	// The clients.
	const clients = 4
	var (
		seen       atomic.Int64 // the largest prefix an answer showed: every id up to it exists for good
		answers    atomic.Int64
		lookups    atomic.Int64
		retryMu    sync.Mutex
		retryables = map[string]int{} // by code and message
	)
	seen.Store(serveChaosInitial)
	clientsCtx, stopClients := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		cl := harness.FlightClient(t, serve.Addr)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 3))
			for i := 0; clientsCtx.Err() == nil; i++ {
				lo := seen.Load()
				qctx, cancel := context.WithTimeout(clientsCtx, 2*time.Minute)
				var sql string
				k := 1 + rng.Int64N(lo)
				if i%2 == 0 {
					sql = `SELECT count(*)::BIGINT, count(DISTINCT id)::BIGINT, coalesce(sum(id), 0)::BIGINT, coalesce(max(id), 0)::BIGINT, coalesce(sum(a + b), 0)::BIGINT FROM ledger`
				} else {
					sql = fmt.Sprintf(`SELECT id, a, b FROM ledger WHERE id = %d`, k)
				}
				rows, err := harness.FlightInt64s(qctx, cl, sql)
				cancel()
				if clientsCtx.Err() != nil {
					return // stopped in the middle: no answer to judge
				}
				if err != nil {
					if code := status.Code(err); slices.Contains(retryableCodes, code) && strings.Contains(status.Convert(err).Message(), "retry") {
						retryMu.Lock()
						retryables[code.String()+": "+status.Convert(err).Message()]++
						retryMu.Unlock()
						continue
					}
					t.Errorf("%s: a non-retryable error (%s): %v", sql, status.Code(err), err)
					stopClients()
					return
				}
				// The writer's one insert in flight may be committed before its Exec returns.
				hi := inserted.Load() + 1
				if bad := judge(i%2 == 0, rows, k, lo, hi); bad != "" {
					t.Errorf("%s: a wrong answer: %s (prefix between %d and %d)", sql, bad, lo, hi)
					stopClients()
					return
				}
				if i%2 == 0 {
					answers.Add(1)
					for n := rows[0][0]; ; {
						old := seen.Load()
						if n <= old || seen.CompareAndSwap(old, n) {
							break
						}
					}
				} else {
					lookups.Add(1)
				}
			}
		}()
	}

	kills := 4
	if v := os.Getenv("SKIPPR_CHAOS_KILLS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("SKIPPR_CHAOS_KILLS=%q: %v", v, err)
		}
		kills = n
	}
	e.KillSyncAtRandom(kills, 1500*time.Millisecond, 4*time.Second)
	stopWriter()
	writer.Wait()
	e.MustRun("sync", "--once", "--wait-lock")
	// The clients go on until serve has shown the whole source at least once (or failed).
	want := inserted.Load()
	harness.WaitFor(t, 2*time.Minute, func() bool { return seen.Load() >= want || clientsCtx.Err() != nil })
	stopClients()
	wg.Wait()
	if t.Failed() {
		t.Fatalf("serve's log:\n%s", tail(serve.Stderr(), 4000))
	}

	// At the end serve's answer is the source's, row by row.
	final := `SELECT id, a, b FROM ledger ORDER BY id`
	got, err := harness.FlightInt64s(ctx, harness.FlightClient(t, serve.Addr), final)
	if err != nil {
		t.Fatalf("%s: %v\n%s", final, err, tail(serve.Stderr(), 4000))
	}
	pgRows, err := pg.Query(ctx, final)
	if err != nil {
		t.Fatal(err)
	}
	var wantRows [][]int64
	for pgRows.Next() {
		var id, a, b int64
		if err := pgRows.Scan(&id, &a, &b); err != nil {
			t.Fatal(err)
		}
		wantRows = append(wantRows, []int64{id, a, b})
	}
	if err := pgRows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(wantRows) {
		t.Fatalf("serve has %d rows at the end, the source %d", len(got), len(wantRows))
	}
	for i := range wantRows {
		if !slices.Equal(got[i], wantRows[i]) {
			t.Fatalf("row %d: serve %v, source %v", i, got[i], wantRows[i])
		}
	}
	if answers.Load() == 0 || lookups.Load() == 0 {
		t.Fatalf("the clients got %d aggregate answers and %d lookups: nothing was checked", answers.Load(), lookups.Load())
	}
	var retried []string
	for m, n := range retryables {
		retried = append(retried, fmt.Sprintf("%d× %s", n, m))
	}
	slices.Sort(retried)
	t.Logf("%s WAL: %d SIGKILLs; %d consistent aggregate answers and %d lookups from %d clients over %d → %d rows; retryable errors: %d %v",
		backend, kills, answers.Load(), lookups.Load(), clients, serveChaosInitial, want, len(retried), retried)
}

// judge says what is wrong with an answer ("" when nothing): an aggregate (count, distinct ids, sum of ids,
// max id, sum of a+b) must be the source's state after the first n inserts for some n in [lo, hi]; a lookup of
// id k (k <= lo, so it exists) must find that one row with a+b = 2k.
func judge(aggregate bool, rows [][]int64, k, lo, hi int64) string {
	if aggregate {
		if len(rows) != 1 || len(rows[0]) != 5 {
			return fmt.Sprintf("%d rows %v", len(rows), rows)
		}
		n, d, s, m, ab := rows[0][0], rows[0][1], rows[0][2], rows[0][3], rows[0][4]
		switch {
		case d != n:
			return fmt.Sprintf("%d rows but %d distinct ids: a row held twice", n, d)
		case m != n || s != n*(n+1)/2:
			return fmt.Sprintf("%d rows, max id %d, sum of ids %d (want %d): a gap", n, m, s, n*(n+1)/2)
		case ab != n*(n+1):
			return fmt.Sprintf("%d rows with sum(a+b) %d, want %d: an update half seen", n, ab, n*(n+1))
		case n < lo:
			return fmt.Sprintf("%d rows: fewer than an earlier answer's %d", n, lo)
		case n > hi:
			return fmt.Sprintf("%d rows: more than the source has committed", n)
		}
		return ""
	}
	if len(rows) != 1 || rows[0][0] != k || rows[0][1]+rows[0][2] != 2*k || rows[0][1] < k {
		return fmt.Sprintf("lookup of id %d (known to exist): %v", k, rows)
	}
	return ""
}

// tail is the end of a long log.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[strings.IndexByte(s[len(s)-n:], '\n')+len(s)-n+1:]
}
