package e2e

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skippr-dev/skippr/test/harness"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// TestSyncMetrics runs datagen → testdest with apply paused (the WAL holds everything), checks the scrape
// against the rows datagen produced and against `skippr status --json`, then resumes apply beside a pipeline
// that fails for good, and checks applied rows, WAL depth and /readyz.
func TestSyncMetrics(t *testing.T) {
	e := harness.NewEnv(t)
	const rows = 3000
	gen := fmt.Sprintf(`{ seed: 5, rows: %d, batch_size: 250, update_ratio: 0.2, delete_ratio: 0.05 }`, rows)
	out := filepath.Join(e.Dir, "out")
	walURL := "file://" + filepath.Join(e.Dir, "wal")
	orders := map[string]string{"pipeline": "orders"}
	group := "      group_commit: { max_bytes: 16KiB, max_delay: 20ms }\n"

	// 1. Apply paused, the address from the config file.
	e.WriteConfig("metrics: { addr: 127.0.0.1:0 }\n" + harness.PipelineConfig(gen, out, "", walURL, group+"    apply: { paused: true }\n"))
	rs := e.StartSync()
	if code, body := rs.Get(t, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz: %d %s", code, body)
	}
	rs.WaitFor(t, func() bool {
		v, _ := rs.Scrape(t).Value("skippr_rows_committed_total", orders)
		return v >= rows
	})
	s := rs.Scrape(t)
	st := e.StatusOf("orders")
	for _, c := range []struct {
		name string
		got  float64
		want float64
	}{
		{"rows read", s.Must(t, "skippr_rows_read_total", orders), rows},
		{"rows committed", s.Must(t, "skippr_rows_committed_total", orders), rows},
		{"rows applied", func() float64 { v, _ := s.Value("skippr_rows_applied_total", orders); return v }(), 0},
		{"WAL entries", s.Must(t, "skippr_wal_entries", orders), float64(st.WAL.Entries)},
		{"WAL bytes", s.Must(t, "skippr_wal_bytes", orders), float64(st.WAL.Bytes)},
		{"WAL last committed", s.Must(t, "skippr_wal_last_committed_seq", orders), float64(st.WAL.LastCommitted)},
		{"commits observed", s.Must(t, "skippr_commit_duration_seconds", orders), float64(st.WAL.LastCommitted)},
		{"bytes committed = WAL frames", s.Must(t, "skippr_bytes_committed_total", orders), s.Must(t, "skippr_bytes_read_total", orders)},
		{"state running", s.Must(t, "skippr_pipeline_state", map[string]string{"pipeline": "orders", "state": "running"}), 1},
		{"restarts", s.Must(t, "skippr_pipeline_restarts_total", orders), 0},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.name, c.got, c.want)
		}
	}
	if st.WAL.Entries < 1 || st.WAL.Bytes == 0 {
		t.Errorf("status shows %d WAL entries of %d bytes; the test wants entries held", st.WAL.Entries, st.WAL.Bytes)
	}
	if age := s.Must(t, "skippr_wal_oldest_unapplied_age_seconds", map[string]string{"pipeline": "orders", "destination": "out"}); age <= 0 {
		t.Errorf("oldest unapplied age %v with apply paused, want > 0", age)
	}
	if code, body := rs.Get(t, "/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz while running: %d %s", code, body)
	}
	rs.Cmd.Process.Signal(syscall.SIGINT)
	rs.Cmd.Wait()

	// 2. Apply resumed, the flag's address; a second pipeline that can never run (an exactly-once pipeline
	// into a destination that cannot honour it).
	// The config's address cannot be bound here (TEST-NET-1): the run only works if the flag wins.
	e.WriteConfig(fmt.Sprintf(`metrics: { addr: "192.0.2.1:9464" }
connections:
  gen:
    plugin: datagen
    version: "~> 0.1"
    settings: %s
  out:
    plugin: testdest
    version: ">= 0.1"
    settings: { dir: %s }
  weak:
    plugin: testdest
    version: ">= 0.1"
    settings: { dir: %s, at_least_once: true }
pipelines:
  orders:
    source: gen
    destinations: [out]
    wal:
      url: %s
%s  broken:
    source: gen
    destinations: [weak]
    wal:
      url: file://%s
`, gen, out, filepath.Join(e.Dir, "weak"), walURL, group, filepath.Join(e.Dir, "wal-broken")))
	rs = e.StartSync("--metrics-addr", "127.0.0.1:0")
	applied := map[string]string{"pipeline": "orders", "destination": "out"}
	rs.WaitFor(t, func() bool {
		s := rs.Scrape(t)
		v, _ := s.Value("skippr_rows_applied_total", applied)
		n, _ := s.Value("skippr_wal_entries", orders)
		return v >= float64(rows) && n == 0
	})
	harness.Compare(t, out, harness.Want(t, gen))
	s = rs.Scrape(t)
	if v := s.Must(t, "skippr_rows_applied_total", applied); v != rows {
		t.Errorf("rows applied %v, want %d", v, rows)
	}
	if v, _ := s.Value("skippr_rows_committed_total", orders); v != 0 {
		t.Errorf("rows committed by the second run %v, want 0 (everything was committed by the first)", v)
	}
	if v := s.Must(t, "skippr_destination_last_applied_seq", applied); v != float64(st.WAL.LastCommitted) {
		t.Errorf("last applied %v, want %d", v, st.WAL.LastCommitted)
	}
	if v := s.Must(t, "skippr_wal_oldest_unapplied_age_seconds", applied); v != 0 {
		t.Errorf("oldest unapplied age %v after everything was applied, want 0", v)
	}
	// A destination that is behind takes a range of entries per apply: the applies are at most the entries,
	// and the entries they covered, summed, are every entry.
	if v := s.Must(t, "skippr_apply_duration_seconds", applied); v < 1 || v > float64(st.WAL.LastCommitted) {
		t.Errorf("applies observed %v, want 1..%d", v, st.WAL.LastCommitted)
	}
	if f := s["skippr_apply_entries"]; f == nil {
		t.Errorf("no skippr_apply_entries in the scrape")
	} else {
		var sum float64
		for _, m := range f.Metric {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["pipeline"] == applied["pipeline"] && labels["destination"] == applied["destination"] {
				sum += m.GetHistogram().GetSampleSum()
			}
		}
		if sum != float64(st.WAL.LastCommitted) {
			t.Errorf("entries applied %v, want %d", sum, st.WAL.LastCommitted)
		}
	}
	if v := s.Must(t, "skippr_pipeline_state", map[string]string{"pipeline": "broken", "state": "failed"}); v != 1 {
		t.Errorf("broken pipeline's failed state %v, want 1", v)
	}
	if v := s.Must(t, "skippr_pipeline_last_error_class", map[string]string{"pipeline": "broken"}); v != 1 {
		t.Errorf("broken pipeline has %v last error classes set, want exactly 1", v)
	}
	code, body := rs.Get(t, "/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "pipeline broken: failed") || strings.Contains(body, "orders") {
		t.Fatalf("/readyz with a failed pipeline: %d %q, want 503 naming broken (and only broken)", code, body)
	}
}

// TestPostgresSourceMetrics runs Postgres → testdest and checks the figures the postgres source reports through
// the protocol: per-table snapshot progress, and the slot's retained WAL and wal_status against the server's own
// pg_replication_slots; then rows committed and applied against the rows the test wrote.
func TestPostgresSourceMetrics(t *testing.T) {
	src := pgtest.NewDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	sc, err := pgx.Connect(ctx, src.Server.ConnString(src.Name))
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close(context.Background())
	const snapshotRows, streamRows = 5000, 700
	harness.CreateOrders(t, ctx, sc, snapshotRows)

	e := harness.NewEnv(t)
	out := filepath.Join(e.Dir, "out")
	s := src.Server
	e.WriteConfig(fmt.Sprintf(`connections:
  src:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: %[1]s, port: %[2]d, user: postgres, database: %[3]s, sslmode: disable, tables: [public.orders], slot: metered, publication: metered, batch_size: 500, heartbeat: 200ms }
  out:
    plugin: testdest
    version: ">= 0.1"
    settings: { dir: %[4]s }
pipelines:
  orders:
    source: src
    destinations: [out]
    wal:
      url: file://%[5]s
      group_commit: { max_bytes: 64KiB, max_delay: 20ms }
`, s.Host, s.Port, src.Name, out, filepath.Join(e.Dir, "wal")))
	rs := e.StartSync("--metrics-addr", "127.0.0.1:0")
	table := map[string]string{"pipeline": "orders", "table": "public.orders"}
	rs.WaitFor(t, func() bool {
		sc := rs.Scrape(t)
		done, _ := sc.Value("skippr_source_snapshot_rows_done", table)
		total, _ := sc.Value("skippr_source_snapshot_rows_total", table)
		return done == snapshotRows && total == snapshotRows
	})
	if _, err := sc.Exec(ctx, fmt.Sprintf(`INSERT INTO orders (id, name) SELECT i, 'late' || i FROM generate_series(%d, %d) i`, snapshotRows+1, snapshotRows+streamRows)); err != nil {
		t.Fatal(err)
	}
	orders := map[string]string{"pipeline": "orders"}
	rs.WaitFor(t, func() bool {
		v, _ := rs.Scrape(t).Value("skippr_rows_applied_total", orders)
		return v >= snapshotRows+streamRows
	})
	slot := map[string]string{"pipeline": "orders", "slot": "metered"}
	var serverRetained int64
	var serverStatus string
	rs.WaitFor(t, func() bool {
		m := rs.Scrape(t)
		if err := sc.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint, wal_status FROM pg_replication_slots WHERE slot_name = 'metered'`).Scan(&serverRetained, &serverStatus); err != nil {
			t.Fatal(err)
		}
		retained, ok := m.Value("skippr_source_slot_retained_wal_bytes", slot)
		status, _ := m.Value("skippr_source_slot_wal_status", map[string]string{"pipeline": "orders", "slot": "metered", "wal_status": serverStatus})
		all, _ := m.Value("skippr_source_slot_wal_status", slot)
		// The source read its figure at its last heartbeat (200ms ago at most); heartbeats and acks move the
		// server's by a few kB in between.
		return ok && retained > 0 && abs(retained-float64(serverRetained)) < 64<<10 && status == 1 && all == 1
	})
	sm := rs.Scrape(t)
	// Nothing held a slot creation back: the wait gauge is there, at 0 and without a reason.
	if w, ok := sm.Value("skippr_source_waiting_seconds", orders); !ok || w != 0 {
		t.Errorf("skippr_source_waiting_seconds = %v (present %v), want 0", w, ok)
	}
	for name, want := range map[string]float64{
		"skippr_rows_committed_total": snapshotRows + streamRows,
		"skippr_rows_applied_total":   snapshotRows + streamRows,
	} {
		if got := sm.Must(t, name, orders); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	t.Logf("slot metered: server says %d bytes retained (%s); metrics agree", serverRetained, serverStatus)
}

func abs(f float64) float64 { return max(f, -f) }
