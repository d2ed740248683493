package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skippr-dev/skippr/test/harness"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// Creating a logical replication slot waits for every transaction that held a transaction id when it began
// (plugins/postgres/source/slotwait.go). These tests hold one open — a session that inserted a row and went
// idle in transaction — while the postgres source creates a slot, on a real server through real plugin
// processes.

// slotWaitEnv is a pipeline "orders" from src (tables in mode: append) into a Postgres destination, and a way to
// hold a transaction open on src.
type slotWaitEnv struct {
	*harness.Env
	src, dst *pgtest.DB
	settings string // extra source settings, "key: value, …"
}

func newSlotWaitEnv(t *testing.T, src *pgtest.DB, settings string) *slotWaitEnv {
	t.Helper()
	dst := pgtest.NewDB(t)
	src.Exec(t, `CREATE TABLE a (v int, note text); INSERT INTO a SELECT i % 100, 'a' FROM generate_series(1, 3000) i;
		CREATE TABLE b (v int, note text); INSERT INTO b SELECT i % 70, 'b' FROM generate_series(1, 20000) i;
		CREATE TABLE held (v int)`)
	return &slotWaitEnv{Env: harness.NewEnvWith(t, "postgres"), src: src, dst: dst, settings: settings}
}

// config writes the pipeline with tables (all in mode: append).
func (e *slotWaitEnv) config(tables ...string) {
	var opts []string
	for _, t := range tables {
		opts = append(opts, t+": { mode: append }")
	}
	s := e.src.Server
	e.WriteConfig(fmt.Sprintf(`connections:
  src:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: %[1]s, port: %[2]d, user: postgres, database: %[3]s, sslmode: disable, tables: [%[6]s], slot: slotwait, publication: slotwait, batch_size: 500, table_options: { %[7]s }%[8]s }
  dst:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: %[9]s, port: %[10]d, user: postgres, database: %[4]s, sslmode: disable }
pipelines:
  orders:
    source: src
    destinations: [dst]
    wal:
      url: file://%[5]s
      group_commit: { max_bytes: 64KiB, max_delay: 50ms }
`, s.Host, s.Port, e.src.Name, e.dst.Name, filepath.Join(e.Dir, "wal"), strings.Join(tables, ", "), strings.Join(opts, ", "), e.settings,
		e.dst.Server.Host, e.dst.Server.Port))
}

// syncStreaming runs `sync --once` twice, a row inserted into a between the runs, so that the last durable
// checkpoint is a stream one, as in a pipeline that has been running a while. (After the first run alone it may
// be the snapshot's last chunk's: the snapshot's closing checkpoint covers no frame, and the engine commits a
// checkpoint only with frames. The source takes such a position as a finished snapshot too:
// TestTableAddedAfterSnapshotWithoutItsClosingCheckpoint in plugins/postgres/source.)
func (e *slotWaitEnv) syncStreaming() {
	e.T.Helper()
	e.MustRun("sync", "--once")
	e.src.Exec(e.T, `INSERT INTO a VALUES (-1, 'streamed')`)
	e.MustRun("sync", "--once")
}

// background is a skippr command running while the test acts on the pipeline; its stderr is kept.
type background struct {
	t      *testing.T
	cmd    *exec.Cmd
	stderr bytes.Buffer
	exited chan error
}

// start runs `skippr args…` in the background.
func (e *slotWaitEnv) start(ctx context.Context, args ...string) *background {
	e.T.Helper()
	b := &background{t: e.T, cmd: e.Cmd(ctx, args...), exited: make(chan error, 1)}
	b.cmd.Stderr = &b.stderr
	if err := b.cmd.Start(); err != nil {
		e.T.Fatal(err)
	}
	go func() { b.exited <- b.cmd.Wait() }()
	return b
}

// until polls ok until it holds; the test fails, saying what it waited for, when the command ends first or
// within passes.
func (b *background) until(what string, within time.Duration, ok func() bool) {
	b.t.Helper()
	for deadline := time.Now().Add(within); !ok(); time.Sleep(200 * time.Millisecond) {
		select {
		case err := <-b.exited:
			b.t.Fatalf("waiting until %s, the command ended (%v):\n%s", what, err, b.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			b.cmd.Process.Kill()
			<-b.exited
			b.t.Fatalf("not within %v: %s:\n%s", within, what, b.stderr.String())
		}
	}
}

// wait returns the command's end (an error for a non-zero exit); the test fails when it runs longer than d.
func (b *background) wait(d time.Duration) error {
	b.t.Helper()
	select {
	case err := <-b.exited:
		return err
	case <-time.After(d):
		b.cmd.Process.Kill()
		<-b.exited
		b.t.Fatalf("the command did not end within %v:\n%s", d, b.stderr.String())
		return nil
	}
}

// holdTransaction opens a session named slotwait_blocker that inserts a row and stays idle in transaction; it
// returns the transaction and its backend's pid.
func (e *slotWaitEnv) holdTransaction(ctx context.Context) (pgx.Tx, int32) {
	t := e.T
	t.Helper()
	c, err := pgx.Connect(ctx, e.src.ConnString()+" application_name=slotwait_blocker")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var pid int32
	if err := tx.QueryRow(ctx, `INSERT INTO held VALUES (1) RETURNING pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	return tx, pid
}

// sameRows fails unless table holds the same rows (as multisets) in the source and the destination.
func (e *slotWaitEnv) sameRows(ctx context.Context, table string) {
	t := e.T
	t.Helper()
	count := func(db *pgtest.DB) map[string]int {
		rows, err := db.Connect(t).Query(ctx, `SELECT v::text || '|' || note, count(*)::int FROM `+table+` GROUP BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (struct {
			k string
			n int
		}, error) {
			var x struct {
				k string
				n int
			}
			err := r.Scan(&x.k, &x.n)
			return x, err
		})
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]int{}
		for _, x := range out {
			m[x.k] = x.n
		}
		return m
	}
	want := count(e.src)
	harness.CompareMultisets(t, "destination's "+table, want, count(e.dst))
	total := 0
	for _, n := range want {
		total += n
	}
	t.Logf("%s: %d rows equal as multisets in source and destination", table, total)
}

// sourceWaiting is what `skippr status --json` says the source of pipeline orders waits for ("" when nothing).
func (e *slotWaitEnv) sourceWaiting() string {
	e.T.Helper()
	var out []struct {
		Live *struct {
			Source struct {
				Waiting string `json:"waiting"`
			} `json:"source"`
		} `json:"live"`
	}
	r := e.Run("status", "--json", "orders")
	if err := json.Unmarshal([]byte(r.Stdout), &out); err != nil || len(out) != 1 {
		e.T.Fatalf("status --json: %v\n%s", err, r.Stdout)
	}
	if out[0].Live == nil {
		return ""
	}
	return out[0].Live.Source.Waiting
}

// sourceIdle says whether the running pipeline's source reported itself caught up (`skippr status --json`).
func (e *slotWaitEnv) sourceIdle() bool {
	e.T.Helper()
	var out []struct {
		Running bool `json:"running"`
		Live    *struct {
			Source struct {
				Idle bool `json:"idle"`
			} `json:"source"`
		} `json:"live"`
	}
	r := e.Run("status", "--json", "orders")
	if err := json.Unmarshal([]byte(r.Stdout), &out); err != nil || len(out) != 1 {
		e.T.Fatalf("status --json: %v\n%s", err, r.Stdout)
	}
	return out[0].Running && out[0].Live != nil && out[0].Live.Source.Idle
}

// TestSlotWaitNamesBlockerThenCopies: a table in mode: append added to a running pipeline is copied under a
// temporary slot, whose creation waits for a session idle in transaction. Within a bounded time the log and
// `skippr status` name that session's pid and application with the fix; rows inserted meanwhile are carried;
// once the session commits, the copy proceeds and the destination equals the source row by row, and status no
// longer shows the wait.
func TestSlotWaitNamesBlockerThenCopies(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	e := newSlotWaitEnv(t, pgtest.NewDB(t), "")
	e.config("public.a")
	e.syncStreaming()

	tx, pid := e.holdTransaction(ctx)
	defer tx.Rollback(context.Background())
	e.config("public.a", "public.b")
	b := e.start(ctx, "sync", "--once")
	start := time.Now()
	wantPID := fmt.Sprintf("pid %d", pid)
	var waiting string
	b.until("status names the blocking "+wantPID, 90*time.Second, func() bool {
		waiting = e.sourceWaiting()
		return strings.Contains(waiting, wantPID)
	})
	shown := time.Since(start)
	for _, s := range []string{`application "slotwait_blocker"`, "state idle in transaction", "before copying public.b", fmt.Sprintf("SELECT pg_terminate_backend(%d)", pid)} {
		if !strings.Contains(waiting, s) {
			t.Fatalf("status's wait lacks %q: %s", s, waiting)
		}
	}
	if text := e.MustRun("status", "orders").Stdout; !strings.Contains(text, "orders: source waiting (") || !strings.Contains(text, wantPID) {
		t.Fatalf("status (text) does not show the wait:\n%s", text)
	}
	// Changes while the copy waits: of the waiting table, and of a table already streaming.
	e.src.Exec(t, `INSERT INTO b SELECT i % 7, 'during' FROM generate_series(1, 300) i; INSERT INTO a SELECT i % 5, 'during' FROM generate_series(1, 200) i`)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.wait(2 * time.Minute); err != nil {
		t.Fatalf("sync --once: %v\n%s", err, b.stderr.String())
	}
	log := b.stderr.String()
	if !strings.Contains(log, "creating a replication slot waits for transactions that were open when it began") || !strings.Contains(log, wantPID) {
		t.Fatalf("the log does not warn naming %s:\n%s", wantPID, log)
	}
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "creating a replication slot waits") {
			t.Logf("the warning: %s", l)
			break
		}
	}
	if w := e.sourceWaiting(); w != "" {
		t.Fatalf("status still shows a wait after the copy: %s", w)
	}
	e.sameRows(ctx, "a")
	e.sameRows(ctx, "b")
	t.Logf("status named the blocker %s after %v", wantPID, shown.Round(time.Millisecond))
}

// TestSlotWaitNamesBlockerOnResumedCopy: a first copy of a table in mode: append that a SIGKILL interrupted starts
// over under a temporary slot when the pipeline runs again. While a session idle in transaction holds that slot
// back, `skippr status` names the session (the Read re-sends the checkpoint it began from, covering nothing, with
// the wait); after its commit the copy runs and the destination equals the source.
func TestSlotWaitNamesBlockerOnResumedCopy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	src := pgtest.NewDB(t)
	src.Exec(t, `CREATE TABLE big (v int, note text); INSERT INTO big SELECT i % 100, 'big' FROM generate_series(1, 300000) i; ANALYZE big`)
	e := newSlotWaitEnv(t, src, "")
	e.config("public.big")
	walDir := filepath.Join(e.Dir, "wal")
	first := e.Cmd(ctx, "sync")
	var firstErr bytes.Buffer
	first.Stderr = &firstErr
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(10 * time.Millisecond) {
		if st := harness.LastCheckpoint(t, walDir); st.Commit != "" {
			break
		}
		if time.Now().After(deadline) {
			first.Process.Kill()
			first.Wait()
			t.Fatalf("no commit in two minutes:\n%s", firstErr.String())
		}
	}
	first.Process.Signal(syscall.SIGKILL)
	first.Wait()
	if st := harness.LastCheckpoint(t, walDir); st.Phase != "snapshot" {
		t.Fatalf("the copy was over before the SIGKILL (phase %q): nothing to resume", st.Phase)
	}

	tx, pid := e.holdTransaction(ctx)
	defer tx.Rollback(context.Background())
	b := e.start(ctx, "sync", "--once")
	wantPID := fmt.Sprintf("pid %d", pid)
	var waiting string
	b.until("status names the blocking "+wantPID, 90*time.Second, func() bool {
		waiting = e.sourceWaiting()
		return strings.Contains(waiting, wantPID)
	})
	if !strings.Contains(waiting, "before copying public.big again") || !strings.Contains(waiting, `application "slotwait_blocker"`) {
		t.Fatalf("status's wait: %s", waiting)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.wait(3 * time.Minute); err != nil {
		t.Fatalf("sync --once: %v\n%s", err, b.stderr.String())
	}
	if w := e.sourceWaiting(); w != "" {
		t.Fatalf("status still shows a wait after the copy: %s", w)
	}
	e.sameRows(ctx, "big")
}

// TestSlotWaitTimesOut: with a short snapshot_wait_timeout, a slot creation held back by a session idle in
// transaction fails the pipeline at once (config: no retry, state failed, exit 1) with a message naming the
// session's pid and application and the fix, and leaves no slot behind — for the pipeline's own slot at its
// start and for the temporary slot of an added table's copy. Once the session ends, the pipeline runs.
func TestSlotWaitTimesOut(t *testing.T) {
	for _, tc := range []struct {
		name  string
		added bool // the wait is the copy's of an added table (else: the main slot's at the start)
		slots int  // replication slots of the source database after the failure
	}{
		{name: "main slot", slots: 0},
		{name: "added table", added: true, slots: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			e := newSlotWaitEnv(t, pgtest.NewDB(t), ", snapshot_wait_timeout: 3s")
			tables := []string{"public.a"}
			if tc.added {
				e.config(tables...)
				e.syncStreaming()
				tables = append(tables, "public.b")
			}
			tx, pid := e.holdTransaction(ctx)
			defer tx.Rollback(context.Background())
			e.config(tables...)
			row := e.SyncFails("config", fmt.Sprintf("end that transaction (COMMIT or ROLLBACK in its session), or SELECT pg_terminate_backend(%d)", pid),
				fmt.Sprintf("pid %d", pid), `application "slotwait_blocker"`, "(snapshot_wait_timeout)")
			if !strings.Contains(row.Fault.Message, fmt.Sprintf("pid %d", pid)) {
				t.Fatalf("the fault's message does not name pid %d: %s", pid, row.Fault.Message)
			}
			// A cancelled creation leaves no slot: the main one is not made, the temporary one ends with its session.
			var slots int
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				if err := e.src.Connect(t).QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE database = $1`, e.src.Name).Scan(&slots); err != nil {
					t.Fatal(err)
				}
				if slots == tc.slots || time.Now().After(deadline) {
					break
				}
			}
			if slots != tc.slots {
				t.Fatalf("%d replication slots of the source database after the failure, want %d", slots, tc.slots)
			}
			if err := tx.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			e.MustRun("sync", "--once")
			for _, table := range tables {
				e.sameRows(ctx, strings.TrimPrefix(table, "public."))
			}
		})
	}
}

// TestExactCopyWithoutFreeSlotFails: a table in mode: append copied again needs a temporary slot. The check at
// start refuses a server without room for it, but a slot taken later (here: by someone else while the pipeline
// runs, before a re-snapshot of the table is asked for) leaves none: the running pipeline then fails at once,
// class config, naming the setting to raise — no retry loop.
func TestExactCopyWithoutFreeSlotFails(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	srv := pgtest.StartServer(t, pgtest.Options{Settings: map[string]string{"max_replication_slots": "2"}})
	e := newSlotWaitEnv(t, srv.NewDB(t), "")
	e.config("public.a")
	e.syncStreaming()
	b := e.start(ctx, "sync")
	// Streaming and caught up: the Read that takes the request is this run's.
	b.until("the source is idle", 2*time.Minute, e.sourceIdle)
	e.src.Exec(t, `SELECT pg_create_logical_replication_slot('someone_elses', 'pgoutput')`)
	e.MustRun("resnapshot", "orders", "public.a")
	b.wait(time.Minute)
	log := b.stderr.String()
	if code := b.cmd.ProcessState.ExitCode(); code != 1 || strings.Contains(log, "restarting") ||
		!strings.Contains(log, "create a temporary replication slot") || !strings.Contains(log, "fix: a table in mode: append whose copy was interrupted") ||
		!strings.Contains(log, "raise max_replication_slots") {
		t.Fatalf("sync: exit %d, want 1 and the failure without a free slot, no retry:\n%s", code, log)
	}
	rj := e.Run("status", "--json")
	var rows []harness.StatusRow
	if err := json.Unmarshal([]byte(rj.Stdout), &rows); err != nil || len(rows) != 1 || rows[0].State != "failed" || rows[0].Fault == nil || rows[0].Fault.Class != "config" {
		t.Fatalf("status --json: %v %s", err, rj.Stdout)
	}
}
