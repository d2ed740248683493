package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/test/harness"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

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
	e := harness.NewEnvWith(t, "postgres")
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
`, s.Host, s.Port, src.Name, dst.Name, filepath.Join(e.Dir, "wal"), strings.Join(tables, ", "), strings.Join(opts, ", ")))
	}
	config("public.a")
	e.MustRun("sync", "--once")
	if st := copyStatus(t, e, "public.a"); st.State != "" {
		t.Fatalf("the initial copy shows as a re-snapshot: %+v", st)
	}

	e.MustRun("resnapshot", "copies", "public.a")
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
func copyStatus(t *testing.T, e *harness.Env, stream string) copyState {
	t.Helper()
	var out []struct {
		Live *struct {
			Resnapshot map[string]copyState `json:"resnapshot"`
		} `json:"live"`
	}
	r := e.MustRun("status", "--json", "copies")
	if err := json.Unmarshal([]byte(r.Stdout), &out); err != nil || len(out) != 1 {
		t.Fatalf("status --json: %v\n%s", err, r.Stdout)
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
func watchCopy(t *testing.T, ctx context.Context, e *harness.Env, dst *pgtest.DB, stream string, rows int64) {
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
	cmd := e.Cmd(ctx, "sync", "--once")
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
	if text := e.MustRun("status", "copies").Stdout; !strings.Contains(text, fmt.Sprintf("copies: re-snapshot of %s: copying since", stream)) {
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
	text := e.MustRun("status", "copies").Stdout
	if want := fmt.Sprintf("copies: re-snapshot of %s: done since", stream); !strings.Contains(text, want) || !strings.Contains(text, fmt.Sprintf("%d/%d rows (100.0%%)", rows, rows)) {
		t.Fatalf("status does not show the copy of %s done with %d rows:\n%s", stream, rows, text)
	}
	t.Logf("%s: status showed it copying (%d/%d rows) while applies were held, then done with %d rows; sync --once took %v", stream, mid.Rows, mid.Total, rows, time.Since(start).Round(time.Millisecond))
}
