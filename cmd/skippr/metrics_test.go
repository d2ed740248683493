package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// lockedBuffer is a process's stderr, read while the process writes it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// runningSync is a `skippr sync` in the background with its metrics server.
type runningSync struct {
	cmd    *exec.Cmd
	stderr *lockedBuffer
	addr   string
}

var metricsAddrLog = regexp.MustCompile(`msg="metrics listening" addr=(\S+)`)

// startSync starts `skippr sync args…` and waits for its metrics server's address in the log (the config or
// flag says port 0).
func (e *env) startSync(args ...string) *runningSync {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	rs := &runningSync{cmd: e.cmd(ctx, append([]string{"sync"}, args...)...), stderr: &lockedBuffer{}}
	rs.cmd.Stderr = rs.stderr
	if err := rs.cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		rs.cmd.Process.Signal(syscall.SIGINT)
		done := make(chan struct{})
		go func() { rs.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			cancel()
			<-done
		}
		cancel()
	})
	deadline := time.Now().Add(2 * time.Minute)
	for rs.addr == "" {
		if m := metricsAddrLog.FindStringSubmatch(rs.stderr.String()); m != nil {
			rs.addr = m[1]
			break
		}
		if time.Now().After(deadline) || rs.cmd.ProcessState != nil {
			e.t.Fatalf("sync logged no metrics address:\n%s", rs.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return rs
}

func (rs *runningSync) get(t *testing.T, path string) (int, string) {
	t.Helper()
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + rs.addr + path)
	if err != nil {
		t.Fatalf("GET %s: %v\nsync stderr:\n%s", path, err, rs.stderr.String())
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// scrape reads /metrics with Prometheus' own text parser.
func (rs *runningSync) scrape(t *testing.T) scraped {
	t.Helper()
	code, body := rs.get(t, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d\n%s", code, body)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v\n%s", err, body)
	}
	return fams
}

type scraped map[string]*dto.MetricFamily

// value sums the samples of name whose labels include want (a histogram counts its observations); ok is false
// when there is none.
func (s scraped) value(name string, want map[string]string) (v float64, ok bool) {
	f := s[name]
	if f == nil {
		return 0, false
	}
metrics:
	for _, m := range f.Metric {
		have := map[string]string{}
		for _, l := range m.Label {
			have[l.GetName()] = l.GetValue()
		}
		for k, w := range want {
			if have[k] != w {
				continue metrics
			}
		}
		ok = true
		switch {
		case m.Counter != nil:
			v += m.Counter.GetValue()
		case m.Gauge != nil:
			v += m.Gauge.GetValue()
		case m.Histogram != nil:
			v += float64(m.Histogram.GetSampleCount())
		}
	}
	return v, ok
}

func (s scraped) must(t *testing.T, name string, want map[string]string) float64 {
	t.Helper()
	v, ok := s.value(name, want)
	if !ok {
		t.Fatalf("no %s%v in the scrape", name, want)
	}
	return v
}

// waitFor polls cond for up to two minutes; on timeout it shows what sync logged.
func (rs *runningSync) waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			code, body := rs.get(t, "/metrics")
			t.Fatalf("condition not met within 2m; /metrics (%d):\n%s\nsync stderr:\n%s", code, grepSkippr(body), rs.stderr.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func grepSkippr(body string) string {
	var keep []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "skippr_") && !strings.Contains(l, "_bucket") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// statusJSON is what the test reads of `skippr status --json`: the WAL as the log itself says.
type statusJSON struct {
	Pipeline string `json:"pipeline"`
	WAL      struct {
		Entries       int    `json:"entries"`
		Bytes         int64  `json:"bytes"`
		LastCommitted uint64 `json:"last_committed"`
	} `json:"wal"`
}

func (e *env) statusOf(pipeline string) statusJSON {
	e.t.Helper()
	var all []statusJSON
	r := e.mustRun("status", "--json", pipeline)
	if err := json.Unmarshal([]byte(r.stdout), &all); err != nil || len(all) != 1 {
		e.t.Fatalf("status --json: %v\n%s", err, r.stdout)
	}
	return all[0]
}

// TestSyncMetrics runs datagen → testdest with apply paused (the WAL holds everything), checks the scrape
// against the rows datagen produced and against `skippr status --json`, then resumes apply beside a pipeline
// that fails for good, and checks applied rows, WAL depth and /readyz.
func TestSyncMetrics(t *testing.T) {
	e := newEnv(t)
	const rows = 3000
	gen := fmt.Sprintf(`{ seed: 5, rows: %d, batch_size: 250, update_ratio: 0.2, delete_ratio: 0.05 }`, rows)
	out := filepath.Join(e.dir, "out")
	walURL := "file://" + filepath.Join(e.dir, "wal")
	orders := map[string]string{"pipeline": "orders"}
	group := "      group_commit: { max_bytes: 16KiB, max_delay: 20ms }\n"

	// 1. Apply paused, the address from the config file.
	e.writeConfig("metrics: { addr: 127.0.0.1:0 }\n" + pipelineConfig(gen, out, "", walURL, group+"    apply: { paused: true }\n"))
	rs := e.startSync()
	if code, body := rs.get(t, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz: %d %s", code, body)
	}
	rs.waitFor(t, func() bool {
		v, _ := rs.scrape(t).value("skippr_rows_committed_total", orders)
		return v >= rows
	})
	s := rs.scrape(t)
	st := e.statusOf("orders")
	for _, c := range []struct {
		name string
		got  float64
		want float64
	}{
		{"rows read", s.must(t, "skippr_rows_read_total", orders), rows},
		{"rows committed", s.must(t, "skippr_rows_committed_total", orders), rows},
		{"rows applied", func() float64 { v, _ := s.value("skippr_rows_applied_total", orders); return v }(), 0},
		{"WAL entries", s.must(t, "skippr_wal_entries", orders), float64(st.WAL.Entries)},
		{"WAL bytes", s.must(t, "skippr_wal_bytes", orders), float64(st.WAL.Bytes)},
		{"WAL last committed", s.must(t, "skippr_wal_last_committed_seq", orders), float64(st.WAL.LastCommitted)},
		{"commits observed", s.must(t, "skippr_commit_duration_seconds", orders), float64(st.WAL.LastCommitted)},
		{"bytes committed = WAL frames", s.must(t, "skippr_bytes_committed_total", orders), s.must(t, "skippr_bytes_read_total", orders)},
		{"state running", s.must(t, "skippr_pipeline_state", map[string]string{"pipeline": "orders", "state": "running"}), 1},
		{"restarts", s.must(t, "skippr_pipeline_restarts_total", orders), 0},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.name, c.got, c.want)
		}
	}
	if st.WAL.Entries < 1 || st.WAL.Bytes == 0 {
		t.Errorf("status shows %d WAL entries of %d bytes; the test wants entries held", st.WAL.Entries, st.WAL.Bytes)
	}
	if age := s.must(t, "skippr_wal_oldest_unapplied_age_seconds", map[string]string{"pipeline": "orders", "destination": "out"}); age <= 0 {
		t.Errorf("oldest unapplied age %v with apply paused, want > 0", age)
	}
	if code, body := rs.get(t, "/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz while running: %d %s", code, body)
	}
	rs.cmd.Process.Signal(syscall.SIGINT)
	rs.cmd.Wait()

	// 2. Apply resumed, the flag's address; a second pipeline that can never run (an exactly-once pipeline
	// into a destination that cannot honour it).
	// The config's address cannot be bound here (TEST-NET-1): the run only works if the flag wins.
	e.writeConfig(fmt.Sprintf(`metrics: { addr: "192.0.2.1:9464" }
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
`, gen, out, filepath.Join(e.dir, "weak"), walURL, group, filepath.Join(e.dir, "wal-broken")))
	rs = e.startSync("--metrics-addr", "127.0.0.1:0")
	applied := map[string]string{"pipeline": "orders", "destination": "out"}
	rs.waitFor(t, func() bool {
		s := rs.scrape(t)
		v, _ := s.value("skippr_rows_applied_total", applied)
		n, _ := s.value("skippr_wal_entries", orders)
		return v >= float64(rows) && n == 0
	})
	compare(t, out, want(t, gen))
	s = rs.scrape(t)
	if v := s.must(t, "skippr_rows_applied_total", applied); v != rows {
		t.Errorf("rows applied %v, want %d", v, rows)
	}
	if v, _ := s.value("skippr_rows_committed_total", orders); v != 0 {
		t.Errorf("rows committed by the second run %v, want 0 (everything was committed by the first)", v)
	}
	if v := s.must(t, "skippr_destination_last_applied_seq", applied); v != float64(st.WAL.LastCommitted) {
		t.Errorf("last applied %v, want %d", v, st.WAL.LastCommitted)
	}
	if v := s.must(t, "skippr_wal_oldest_unapplied_age_seconds", applied); v != 0 {
		t.Errorf("oldest unapplied age %v after everything was applied, want 0", v)
	}
	// A destination that is behind takes a range of entries per apply: the applies are at most the entries,
	// and the entries they covered, summed, are every entry.
	if v := s.must(t, "skippr_apply_duration_seconds", applied); v < 1 || v > float64(st.WAL.LastCommitted) {
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
	if v := s.must(t, "skippr_pipeline_state", map[string]string{"pipeline": "broken", "state": "failed"}); v != 1 {
		t.Errorf("broken pipeline's failed state %v, want 1", v)
	}
	if v := s.must(t, "skippr_pipeline_last_error_class", map[string]string{"pipeline": "broken"}); v != 1 {
		t.Errorf("broken pipeline has %v last error classes set, want exactly 1", v)
	}
	code, body := rs.get(t, "/readyz")
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
	createOrders(t, ctx, sc, snapshotRows)

	e := newEnv(t)
	out := filepath.Join(e.dir, "out")
	s := src.Server
	e.writeConfig(fmt.Sprintf(`connections:
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
`, s.Host, s.Port, src.Name, out, filepath.Join(e.dir, "wal")))
	rs := e.startSync("--metrics-addr", "127.0.0.1:0")
	table := map[string]string{"pipeline": "orders", "table": "public.orders"}
	rs.waitFor(t, func() bool {
		sc := rs.scrape(t)
		done, _ := sc.value("skippr_source_snapshot_rows_done", table)
		total, _ := sc.value("skippr_source_snapshot_rows_total", table)
		return done == snapshotRows && total == snapshotRows
	})
	if _, err := sc.Exec(ctx, fmt.Sprintf(`INSERT INTO orders (id, name) SELECT i, 'late' || i FROM generate_series(%d, %d) i`, snapshotRows+1, snapshotRows+streamRows)); err != nil {
		t.Fatal(err)
	}
	orders := map[string]string{"pipeline": "orders"}
	rs.waitFor(t, func() bool {
		v, _ := rs.scrape(t).value("skippr_rows_applied_total", orders)
		return v >= snapshotRows+streamRows
	})
	slot := map[string]string{"pipeline": "orders", "slot": "metered"}
	var serverRetained int64
	var serverStatus string
	rs.waitFor(t, func() bool {
		m := rs.scrape(t)
		if err := sc.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint, wal_status FROM pg_replication_slots WHERE slot_name = 'metered'`).Scan(&serverRetained, &serverStatus); err != nil {
			t.Fatal(err)
		}
		retained, ok := m.value("skippr_source_slot_retained_wal_bytes", slot)
		status, _ := m.value("skippr_source_slot_wal_status", map[string]string{"pipeline": "orders", "slot": "metered", "wal_status": serverStatus})
		all, _ := m.value("skippr_source_slot_wal_status", slot)
		// The source read its figure at its last heartbeat (200ms ago at most); heartbeats and acks move the
		// server's by a few kB in between.
		return ok && retained > 0 && abs(retained-float64(serverRetained)) < 64<<10 && status == 1 && all == 1
	})
	sm := rs.scrape(t)
	// Nothing held a slot creation back: the wait gauge is there, at 0 and without a reason.
	if w, ok := sm.value("skippr_source_waiting_seconds", orders); !ok || w != 0 {
		t.Errorf("skippr_source_waiting_seconds = %v (present %v), want 0", w, ok)
	}
	for name, want := range map[string]float64{
		"skippr_rows_committed_total": snapshotRows + streamRows,
		"skippr_rows_applied_total":   snapshotRows + streamRows,
	} {
		if got := sm.must(t, name, orders); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	t.Logf("slot metered: server says %d bytes retained (%s); metrics agree", serverRetained, serverStatus)
}

func abs(f float64) float64 { return max(f, -f) }
