package chaos

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skippr-dev/skippr/test/harness"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// TestAppendTableExactlyOnceAcrossSIGKILL runs a table in mode: append (no key, no REPLICA IDENTITY FULL) from
// Postgres into a Postgres destination and an Iceberg lake through `skippr sync`, while a writer inserts rows
// (equal rows among them) and once truncates the table, and SIGKILLs the engine at random points: first
// while the table is being copied (the last durable checkpoint is in the snapshot phase), then while streaming.
// At the end both destinations must hold exactly the source's rows as multisets: with no key, a row the
// interrupted copy and the stream both carried would be a second copy (plugins/postgres/source/exact.go).
func TestAppendTableExactlyOnceAcrossSIGKILL(t *testing.T) {
	src, dst := pgtest.NewDB(t), pgtest.NewDB(t)
	// No deadline of its own: every wait below fails when its run stops making progress, and `go test -timeout`
	// catches the rest (a fixed 12 minutes failed a loaded CI run that was still moving).
	ctx := t.Context()
	sc := src.Connect(t)
	if _, err := sc.Exec(ctx, `CREATE TABLE readings (device text, reading int, note text);
		INSERT INTO readings SELECT 'd' || (i % 5), i % 1000, CASE WHEN i % 11 = 0 THEN NULL ELSE 'n' || (i % 300) END FROM generate_series(1, 200000) i;
		CREATE TABLE marks (device text, reading int, note text);
		INSERT INTO marks SELECT 'm' || (i % 3), i % 100, NULL FROM generate_series(1, 20000) i;
		CREATE TABLE late (device text, reading int, note text);
		INSERT INTO late SELECT 'l' || (i % 3), i % 500, NULL FROM generate_series(1, 300000) i`); err != nil {
		t.Fatal(err)
	}

	e := harness.NewEnvWith(t, "postgres", "iceberg")
	s := src.Server
	config := func(tables ...string) {
		var opts []string
		for _, t := range tables {
			opts = append(opts, t+": { mode: append }")
		}
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
      tables: [%[7]s]
      slot: appendx
      publication: appendx
      batch_size: 500
      table_options: { %[8]s }
  dst:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: %[1]s, port: %[2]d, user: postgres, database: %[4]s, sslmode: disable }
  lake:
    plugin: iceberg
    version: "~> 0.1"
    settings: %[6]s
pipelines:
  readings:
    source: src
    destinations: [dst, lake]
    wal:
      url: file://%[5]s
      group_commit: { max_bytes: 64KiB, max_delay: 50ms }
`, s.Host, s.Port, src.Name, dst.Name, filepath.Join(e.Dir, "wal"), harness.KeylessLakeSettings(e), strings.Join(tables, ", "), strings.Join(opts, ", ")))
	}
	config("public.readings", "public.marks")

	truncates := 0
	startWriter := func() (stop func()) {
		// A connection of its own each time: pgx closes a connection whose query a cancelled context interrupts,
		// so the first writer's stop can leave its connection closed.
		w := src.Connect(t)
		writerCtx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(5, 6))
			for i := 0; writerCtx.Err() == nil; i++ {
				var q string
				switch {
				case i == 200:
					// Rows before and after the TRUNCATE in one transaction: only the ones after it survive. Once, early
					// (it waits for the copy's lock), and in the other table: it erases the evidence of rows a copy
					// repeated before it.
					q = `BEGIN; INSERT INTO marks VALUES ('before', 1, 'x'); TRUNCATE marks;
					INSERT INTO marks SELECT 'after', g % 7, NULL FROM generate_series(1, 50) g; COMMIT`
					truncates++
				case i%4 == 0:
					q = fmt.Sprintf(`INSERT INTO marks VALUES ('w', %d, 'row')`, rng.IntN(5))
				case i%4 == 1:
					q = fmt.Sprintf(`INSERT INTO late SELECT 'w', %d, 'row' FROM generate_series(1, %d)`, rng.IntN(5), 1+rng.IntN(3))
				default:
					// 1..10 rows, equal ones among them (and equal to rows inserted before).
					n := 1 + rng.IntN(10)
					q = fmt.Sprintf(`INSERT INTO readings SELECT 'w' || (g %% 3), %d + g %% 4, 'row' FROM generate_series(1, %d) g`, rng.IntN(50), n)
				}
				if _, err := w.Exec(writerCtx, q); err != nil && writerCtx.Err() == nil {
					t.Errorf("writer: %v", err)
					return
				}
				time.Sleep(3 * time.Millisecond)
			}
		}()
		return func() { cancel(); wg.Wait() }
	}
	stop := startWriter()

	seed := time.Now().UnixNano()
	t.Logf("kill seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 17))
	walDir := filepath.Join(e.Dir, "wal")
	// killAfter starts `skippr sync`, waits for a commit of the run that satisfies want (or one past every copy:
	// in the stream phase, no table left to copy), waits a random time up to most, SIGKILLs the run and returns
	// the last durable checkpoint's state.
	killAfter := func(kill int, want func(harness.WalState) bool, least, most time.Duration) harness.WalState {
		before := harness.LastCheckpoint(t, walDir)
		cmd := e.Cmd(ctx, "sync", "--wait-lock")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(10 * time.Millisecond) {
			st := harness.LastCheckpoint(t, walDir)
			if st.Commit != before.Commit && (want(st) || st.Copied()) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("run %d: no commit to wait for in two minutes:\n%s", kill, stderr.String())
			}
		}
		time.Sleep(least + time.Duration(rng.Int64N(int64(most-least))))
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		// A wait the source reported (a slot creation held back by an open transaction, a slot still held by
		// the killed run's walsender) says where a slow run spent its time.
		for _, l := range strings.Split(stderr.String(), "\n") {
			if strings.Contains(l, " plugin=") && (strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR")) {
				t.Logf("run %d: %s", kill, l)
			}
		}
		if cmd.ProcessState.Exited() {
			t.Fatalf("run %d: sync exited by itself (%d) before it was killed:\n%s", kill, cmd.ProcessState.ExitCode(), stderr.String())
		}
		return harness.LastCheckpoint(t, walDir)
	}
	compare := func(tables ...string) {
		t.Helper()
		// Catching up after the kills takes as long as the machine's load makes it: the run fails only when its
		// WAL and its log stop moving for two minutes (a fixed limit failed a loaded CI run still catching up).
		// The destination's statements count as progress too: a large range into Postgres is one long
		// transaction during which neither the WAL nor the log moves, while a hung apply repeats no statement.
		wal, pg := harness.WALProgress(t, walDir), dst.Connect(t)
		defer pg.Close(context.Background())
		progress := func() string {
			var stmts string
			if err := pg.QueryRow(ctx, `SELECT coalesce(string_agg(pid || ' ' || coalesce(query_start::text, '') || ' ' ||
				coalesce(state_change::text, ''), ';' ORDER BY pid), '') FROM pg_stat_activity
				WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&stmts); err != nil {
				t.Errorf("destination activity: %v", err)
			}
			return wal() + "|" + stmts
		}
		e.MustRunWhileProgressing(2*time.Minute, progress, "sync", "--once")
		for _, table := range tables {
			compareAppendTable(t, ctx, sc, dst.Connect(t), harness.KeylessLakeSettings(e), table)
		}
	}

	// Up to three kills while the tables are being copied (a run is killed soon after its first commit in the
	// snapshot phase; at least one must land before the copy ends), then three while streaming.
	var inCopy, inStream int
	for kill := 0; inStream < 3; kill++ {
		var st harness.WalState
		if inCopy < 3 && inStream == 0 {
			st = killAfter(kill, func(st harness.WalState) bool { return st.Phase == "snapshot" }, 0, 300*time.Millisecond)
		} else {
			st = killAfter(kill, func(harness.WalState) bool { return false }, 200*time.Millisecond, 1500*time.Millisecond)
		}
		switch {
		case st.Phase == "snapshot":
			inCopy++
		case inCopy == 0:
			t.Fatalf("run %d: the copy ended before the first kill", kill)
		default:
			inStream++
		}
	}
	stop()
	if truncates == 0 {
		t.Fatal("the writer made no TRUNCATE")
	}
	compare("readings", "marks")
	t.Logf("initial copy: %d SIGKILLs during the copy, %d while streaming, %d TRUNCATEs", inCopy, inStream, truncates)

	// A table in mode: append added to the running pipeline, with 300,000 rows and inserts going on (before it
	// was added too): copied while streaming under an exact snapshot of its own. Kills while it is being copied
	// (a checkpoint names it in recopy), then while streaming.
	config("public.readings", "public.marks", "public.late")
	stop = startWriter()
	var inRecopy, after int
	for kill := 0; after < 2; kill++ {
		var st harness.WalState
		if inRecopy < 3 && after == 0 {
			st = killAfter(kill, func(st harness.WalState) bool { return len(st.Recopy) > 0 }, 0, 300*time.Millisecond)
		} else {
			st = killAfter(kill, func(harness.WalState) bool { return false }, 200*time.Millisecond, 1500*time.Millisecond)
		}
		switch {
		case len(st.Recopy) > 0:
			inRecopy++
		case inRecopy == 0:
			t.Fatalf("run %d: the added table's copy ended before the first kill", kill)
		default:
			after++
		}
	}
	stop()
	compare("readings", "marks", "late")
	t.Logf("added table: %d SIGKILLs during its copy, %d after", inRecopy, after)
}

// compareAppendTable compares table in the source (sc), the Postgres destination (dc) and the lake as multisets.
func compareAppendTable(t *testing.T, ctx context.Context, sc, dc *pgx.Conn, lakeSettings, table string) {
	t.Helper()
	count := func(c *pgx.Conn) map[string]int {
		rows, err := c.Query(ctx, `SELECT coalesce(device, '<null>') || '|' || coalesce(reading::text, '<null>') || '|' || coalesce(note, '<null>'), count(*)::int FROM `+table+` GROUP BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[string]int{}
		for rows.Next() {
			var k string
			var n int
			if err := rows.Scan(&k, &n); err != nil {
				t.Fatal(err)
			}
			out[k] = n
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	want := count(sc)
	harness.CompareMultisets(t, "Postgres destination's "+table, want, count(dc))
	n := 0
	lake := map[string]int{}
	for _, row := range harness.PluginRows(t, "iceberg", "scan", lakeSettings, "public."+table, "the lake table", func([]byte, map[string]any) string {
		n++
		return fmt.Sprint(n)
	}) {
		str := func(k string) string {
			if row[k] == nil {
				return "<null>"
			}
			return fmt.Sprint(row[k])
		}
		lake[str("device")+"|"+str("reading")+"|"+str("note")]++
	}
	harness.CompareMultisets(t, "lake's "+table, want, lake)
	total := 0
	for _, c := range want {
		total += c
	}
	t.Logf("%s: %d rows (%d distinct) equal as multisets in source, Postgres and lake", table, total, len(want))
}
