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

	w := src.Connect(t)
	truncates := 0
	startWriter := func() (stop func()) {
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
