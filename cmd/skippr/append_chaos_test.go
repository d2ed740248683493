package main_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	sc := src.Connect(t)
	if _, err := sc.Exec(ctx, `CREATE TABLE readings (device text, reading int, note text);
		INSERT INTO readings SELECT 'd' || (i % 5), i % 1000, CASE WHEN i % 11 = 0 THEN NULL ELSE 'n' || (i % 300) END FROM generate_series(1, 1000000) i;
		CREATE TABLE marks (device text, reading int, note text);
		INSERT INTO marks SELECT 'm' || (i % 3), i % 100, NULL FROM generate_series(1, 50000) i;
		CREATE TABLE late (device text, reading int, note text);
		INSERT INTO late SELECT 'l' || (i % 3), i % 500, NULL FROM generate_series(1, 400000) i`); err != nil {
		t.Fatal(err)
	}

	e := newEnvWith(t, "postgres", "iceberg")
	s := src.Server
	config := func(tables ...string) {
		var opts []string
		for _, t := range tables {
			opts = append(opts, t+": { mode: append }")
		}
		e.writeConfig(fmt.Sprintf(`connections:
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
`, s.Host, s.Port, src.Name, dst.Name, filepath.Join(e.dir, "wal"), keylessLakeSettings(e), strings.Join(tables, ", "), strings.Join(opts, ", ")))
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
	walDir := filepath.Join(e.dir, "wal")
	// killAfter starts `skippr sync`, waits for a commit of the run that satisfies want (or one past every copy:
	// in the stream phase, no table left to copy), waits a random time up to most, SIGKILLs the run and returns
	// the last durable checkpoint's state.
	killAfter := func(kill int, want func(walState) bool, least, most time.Duration) walState {
		before := lastCheckpoint(t, walDir)
		cmd := e.cmd(ctx, "sync", "--wait-lock")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(10 * time.Millisecond) {
			st := lastCheckpoint(t, walDir)
			if st.Commit != before.Commit && (want(st) || st.copied()) {
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
		return lastCheckpoint(t, walDir)
	}
	compare := func(tables ...string) {
		t.Helper()
		e.mustRun("sync", "--once")
		for _, table := range tables {
			compareAppendTable(t, ctx, sc, dst.Connect(t), keylessLakeSettings(e), table)
		}
	}

	// Up to three kills while the tables are being copied (a run is killed soon after its first commit in the
	// snapshot phase; at least one must land before the copy ends), then three while streaming.
	var inCopy, inStream int
	for kill := 0; inStream < 3; kill++ {
		var st walState
		if inCopy < 3 && inStream == 0 {
			st = killAfter(kill, func(st walState) bool { return st.Phase == "snapshot" }, 0, 300*time.Millisecond)
		} else {
			st = killAfter(kill, func(walState) bool { return false }, 200*time.Millisecond, 1500*time.Millisecond)
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

	// A table in mode: append added to the running pipeline, with 400,000 rows and inserts going on (before it
	// was added too): copied while streaming under an exact snapshot of its own. Kills while it is being copied
	// (a checkpoint names it in recopy), then while streaming.
	config("public.readings", "public.marks", "public.late")
	stop = startWriter()
	var inRecopy, after int
	for kill := 0; after < 2; kill++ {
		var st walState
		if inRecopy < 3 && after == 0 {
			st = killAfter(kill, func(st walState) bool { return len(st.Recopy) > 0 }, 0, time.Second)
		} else {
			st = killAfter(kill, func(walState) bool { return false }, 200*time.Millisecond, 1500*time.Millisecond)
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
	compareMultisets(t, "Postgres destination's "+table, want, count(dc))
	n := 0
	lake := map[string]int{}
	for _, row := range pluginRows(t, "iceberg", "scan", lakeSettings, "public."+table, "the lake table", func([]byte, map[string]any) string {
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
	compareMultisets(t, "lake's "+table, want, lake)
	total := 0
	for _, c := range want {
		total += c
	}
	t.Logf("%s: %d rows (%d distinct) equal as multisets in source, Postgres and lake", table, total, len(want))
}

// compareMultisets fails the test when got (row → count) differs from want, naming up to ten differing rows.
func compareMultisets(t *testing.T, what string, want, got map[string]int) {
	t.Helper()
	var diff []string
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if got[k] != want[k] {
			diff = append(diff, fmt.Sprintf("%s: source %d, %s %d", k, want[k], what, got[k]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[k]; !ok {
			diff = append(diff, fmt.Sprintf("%s: source 0, %s %d", k, what, got[k]))
		}
	}
	if len(diff) > 0 {
		t.Fatalf("%s differs from the source in %d rows (as multisets), e.g.:\n%v", what, len(diff), diff[:min(10, len(diff))])
	}
}

// walState is what the last commit record of a local WAL says of a postgres source.
type walState struct {
	Commit string                     // the record's name, "" when there is none
	Phase  string                     `json:"phase"`
	Recopy map[string]json.RawMessage `json:"recopy"`
}

// copied says every copy is over: streaming, with no table in mode: append left to copy.
func (s walState) copied() bool { return s.Phase == "stream" && len(s.Recopy) == 0 }

// lastCheckpoint reads the last commit record of the local WAL at dir.
func lastCheckpoint(t *testing.T, dir string) walState {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "commits", "*.json"))
	names = slices.DeleteFunc(names, func(n string) bool { return filepath.Base(n)[0] == '.' }) // unfinished writes
	if err != nil || len(names) == 0 {
		return walState{}
	}
	slices.Sort(names)
	last := names[len(names)-1]
	b, err := os.ReadFile(last)
	if err != nil {
		return walState{} // reclaimed meanwhile
	}
	var rec struct {
		Body struct {
			Checkpoint string `json:"checkpoint"`
		} `json:"body"`
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatalf("commit record %s: %v", last, err)
	}
	cp, err := base64.StdEncoding.DecodeString(rec.Body.Checkpoint)
	if err != nil {
		t.Fatalf("commit record %s: checkpoint: %v", last, err)
	}
	var st walState
	if err := json.Unmarshal(cp, &st); err != nil {
		t.Fatalf("commit record %s: checkpoint %q: %v", last, cp, err)
	}
	st.Commit = filepath.Base(last)
	return st
}

// TestAppendTableCopyShowsInStatus: the copy of a table in mode: append while streaming — asked for with `skippr
// resnapshot`, or for a table added to the pipeline — sends no re-snapshot marks (there is no key to bracket), yet
// `skippr status` shows it as it shows a keyed re-snapshot: "copying" with rows done of the total while it runs,
// then "done" with the count, in --json and in text (the source's resnapshot_* gauges carry it). Without a
// request, the added table's copy shows all the same.
func TestAppendTableCopyShowsInStatus(t *testing.T) {
	src, dst := pgtest.NewDB(t), pgtest.NewDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	const rowsA, rowsB = 300000, 200000
	sc := src.Connect(t)
	if _, err := sc.Exec(ctx, fmt.Sprintf(`CREATE TABLE a (v int, note text); INSERT INTO a SELECT i %% 100, 'a' FROM generate_series(1, %d) i;
		CREATE TABLE b (v int, note text); INSERT INTO b SELECT i %% 70, 'b' FROM generate_series(1, %d) i; ANALYZE a, b`, rowsA, rowsB)); err != nil {
		t.Fatal(err)
	}
	e := newEnvWith(t, "postgres")
	s := src.Server
	config := func(tables ...string) {
		var opts []string
		for _, t := range tables {
			opts = append(opts, t+": { mode: append }")
		}
		e.writeConfig(fmt.Sprintf(`connections:
  src:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: %[1]s, port: %[2]d, user: postgres, database: %[3]s, sslmode: disable, tables: [%[6]s], slot: copies, publication: copies, batch_size: 500, table_options: { %[7]s } }
  dst:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: %[1]s, port: %[2]d, user: postgres, database: %[4]s, sslmode: disable }
pipelines:
  copies:
    source: src
    destinations: [dst]
    wal:
      url: file://%[5]s
      group_commit: { max_bytes: 64KiB, max_delay: 50ms }
      max_unapplied_bytes: 256KiB
`, s.Host, s.Port, src.Name, dst.Name, filepath.Join(e.dir, "wal"), strings.Join(tables, ", "), strings.Join(opts, ", ")))
	}
	config("public.a")
	e.mustRun("sync", "--once")
	if st := copyStatus(t, e, "public.a"); st.State != "" {
		t.Fatalf("the initial copy shows as a re-snapshot: %+v", st)
	}

	e.mustRun("resnapshot", "copies", "public.a")
	watchCopy(t, ctx, e, dst, "public.a", rowsA)
	config("public.a", "public.b")
	watchCopy(t, ctx, e, dst, "public.b", rowsB)

	dc := dst.Connect(t)
	for table, want := range map[string]int64{"a": rowsA, "b": rowsB} {
		var n int64
		if err := dc.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != want {
			t.Fatalf("destination table %s holds %d rows, want %d", table, n, want)
		}
	}
}

// copyState is a stream's re-snapshot as `skippr status --json` shows it.
type copyState struct {
	State       string
	Rows, Total int64
}

// copyStatus is stream's re-snapshot in `skippr status --json` of pipeline copies; State "" when it has none.
func copyStatus(t *testing.T, e *env, stream string) copyState {
	t.Helper()
	var out []struct {
		Live *struct {
			Resnapshot map[string]copyState `json:"resnapshot"`
		} `json:"live"`
	}
	r := e.mustRun("status", "--json", "copies")
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || len(out) != 1 {
		t.Fatalf("status --json: %v\n%s", err, r.stdout)
	}
	if out[0].Live == nil {
		return copyState{}
	}
	return out[0].Live.Resnapshot[stream]
}

// watchCopy runs `sync --once` (it ends once the copy of stream is over and the source is idle) while the
// destination's applies wait for a lock the test holds: with a small max_unapplied_bytes the engine then stops
// reading mid-copy, so `skippr status` must show stream copying with rows done of a total however fast the copy
// would otherwise be. Once the lock is released the copy ends, and status must show it done with rows.
func watchCopy(t *testing.T, ctx context.Context, e *env, dst *pgtest.DB, stream string, rows int64) {
	t.Helper()
	hold, err := dst.Connect(t).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback(context.Background())
	// A table lock, not a row lock: a transaction with an xid would hold back the temporary slot the copy makes
	// (same server), and the copy would never begin.
	if _, err := hold.Exec(ctx, `LOCK TABLE public.skippr_state IN SHARE MODE`); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	cmd := e.cmd(ctx, "sync", "--once")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var mid copyState
	for deadline := time.Now().Add(2 * time.Minute); mid.State == ""; time.Sleep(50 * time.Millisecond) {
		select {
		case err := <-exited:
			t.Fatalf("sync --once ended while its applies were held (%v):\n%s", err, stderr.String())
		default:
		}
		if st := copyStatus(t, e, stream); st.State == "copying" && st.Rows > 0 {
			mid = st
		}
		if time.Now().After(deadline) {
			last := copyStatus(t, e, stream)
			cmd.Process.Kill()
			<-exited // stderr is complete, and no longer written
			t.Fatalf("status never showed %s copying with rows done; last %+v:\n%s", stream, last, stderr.String())
		}
	}
	if mid.Rows >= rows || mid.Total < mid.Rows || mid.Total == 0 {
		t.Fatalf("status showed %s copying at %+v, of %d rows", stream, mid, rows)
	}
	if text := e.mustRun("status", "copies").stdout; !strings.Contains(text, fmt.Sprintf("copies: re-snapshot of %s: copying since", stream)) {
		t.Fatalf("status does not show the copy of %s:\n%s", stream, text)
	}
	if err := hold.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-exited; err != nil {
		t.Fatalf("sync --once: %v\n%s", err, stderr.String())
	}
	if st := copyStatus(t, e, stream); st != (copyState{State: "done", Rows: rows, Total: rows}) {
		t.Fatalf("status after the copy of %s: %+v, want done with %d rows", stream, st, rows)
	}
	text := e.mustRun("status", "copies").stdout
	if want := fmt.Sprintf("copies: re-snapshot of %s: done since", stream); !strings.Contains(text, want) || !strings.Contains(text, fmt.Sprintf("%d/%d rows (100.0%%)", rows, rows)) {
		t.Fatalf("status does not show the copy of %s done with %d rows:\n%s", stream, rows, text)
	}
	t.Logf("%s: status showed it copying (%d/%d rows) while applies were held, then done with %d rows; sync --once took %v", stream, mid.Rows, mid.Total, rows, time.Since(start).Round(time.Millisecond))
}
