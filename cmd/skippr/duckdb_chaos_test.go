package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDatagenToDuckDBSurvivesSIGKILL runs datagen (inserts, updates, deletes, nested columns) into a DuckDB
// file through an exactly-once `skippr sync`, SIGKILLing the engine at random moments (its orphaned DuckDB
// plugin then dies holding the file lock, possibly inside a transaction), then the DuckDB plugin alone,
// finishes with a clean run, and compares the table with what the source produced, row by row, and the state
// row with the WAL. SKIPPR_CHAOS_KILLS sets the SIGKILLs of skippr sync (default 10; a third as many of the
// plugin alone).
func TestDatagenToDuckDBSurvivesSIGKILL(t *testing.T) {
	kills := 10
	if v := os.Getenv("SKIPPR_CHAOS_KILLS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("SKIPPR_CHAOS_KILLS=%q: %v", v, err)
		}
		kills = n
	}
	e := newEnv(t)
	gen := `{ seed: 33, rows: 30000, rows_per_second: 6000, batch_size: 500, nested: true, update_ratio: 0.2, delete_ratio: 0.05 }`
	settings := fmt.Sprintf(`{"path": %q, "schema": "analytics"}`, filepath.Join(e.dir, "dest", "chaos.duckdb"))
	e.writeConfig(fmt.Sprintf(`connections:
  gen:
    plugin: datagen
    version: "~> 0.1"
    settings: %s
  duck:
    plugin: duckdb
    version: "~> 0.1"
    settings: %s
pipelines:
  orders:
    source: gen
    destinations: [duck]
    delivery: exactly-once
    wal:
      url: file://%s
      group_commit: { max_bytes: 64KiB, max_delay: 50ms }
`, gen, settings, filepath.Join(e.dir, "wal")))

	start := time.Now()
	e.killSyncAtRandom(kills, 500*time.Millisecond, 2500*time.Millisecond)
	// The DuckDB plugin SIGKILLed alone, mid-apply or between applies: the engine restarts it and the new
	// process recovers the file from DuckDB's WAL.
	pluginKills := max(1, kills/3)
	for i := 0; i < pluginKills; i++ {
		e.killPluginAtRandom("skippr-plugin-duckdb", 100*time.Millisecond, 1500*time.Millisecond)
	}
	e.mustRun("sync", "--once", "--wait-lock")

	got := dumpDuckDB(t, settings, "events")
	want := want(t, gen)["events"]
	if len(got) != len(want) {
		t.Fatalf("DuckDB table has %d rows, the source produced %d", len(got), len(want))
	}
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Fatalf("id %s: missing from the DuckDB table", k)
		}
		if len(g) != len(w) {
			t.Fatalf("id %s: DuckDB row has columns %v, source row %v", k, g, w)
		}
		for col, v := range w {
			if !sameDuckValue(g[col], v) {
				t.Fatalf("id %s column %s: DuckDB %v, source %v", k, col, g[col], v)
			}
		}
	}
	// The state row names the last WAL entry: everything committed was applied, and recorded with it.
	state := dumpDuckDB(t, settings, "_skippr_state")
	var status []struct {
		WAL struct {
			LastCommitted uint64 `json:"last_committed"`
		} `json:"wal"`
	}
	if r := e.mustRun("status", "--json"); json.Unmarshal([]byte(r.stdout), &status) != nil || len(status) != 1 {
		t.Fatalf("status --json: %s", r.stdout)
	}
	if row, ok := state[`"orders"`]; !ok || fmt.Sprint(row["sequence"]) != fmt.Sprint(status[0].WAL.LastCommitted) {
		t.Fatalf("state table %v, WAL committed through %d", state, status[0].WAL.LastCommitted)
	}
	t.Logf("%d SIGKILLs of skippr sync, %d of the DuckDB plugin alone (%s after the builds); the DuckDB table's %d rows equal the source's; state %v",
		kills, pluginKills, time.Since(start).Round(time.Second), len(got), state)
}

// killPluginAtRandom starts `skippr sync --wait-lock`, waits for its plugin process whose command line holds
// name, SIGKILLs it after a random time in [lo, hi), lets the engine carry on for a moment, then SIGKILLs the
// sync too.
func (e *env) killPluginAtRandom(name string, lo, hi time.Duration) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := e.cmd(ctx, "sync", "--wait-lock")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	pid := 0
	for end := time.Now().Add(30 * time.Second); pid == 0 && time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		pid = childByName(cmd.Process.Pid, name)
	}
	if pid == 0 {
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		e.t.Fatalf("sync started no %s process within 30s:\n%s", name, stderr.String())
	}
	time.Sleep(lo + time.Duration(rand.Int64N(int64(hi-lo))))
	syscall.Kill(pid, syscall.SIGKILL)
	time.Sleep(time.Duration(300+rand.IntN(700)) * time.Millisecond)
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if cmd.ProcessState.Exited() && cmd.ProcessState.ExitCode() != 0 {
		e.t.Fatalf("sync exited by itself (%d) after its plugin %s was killed:\n%s", cmd.ProcessState.ExitCode(), name, stderr.String())
	}
}

// childByName returns the child process of pid whose command line contains name, or 0.
func childByName(pid int, name string) int {
	entries, _ := os.ReadDir("/proc")
	for _, d := range entries {
		n, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", d.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(stat)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 2 || f[1] != strconv.Itoa(pid) {
			continue
		}
		if cmdline, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline")); err == nil && bytes.Contains(cmdline, []byte(name)) {
			return n
		}
	}
	return 0
}

// dumpDuckDB reads a table with the duckdb plugin binary's dump command, outside the engine, keyed by the
// first column's JSON text (the key comes first in every table here); a key held twice fails the test.
func dumpDuckDB(t *testing.T, settings, stream string) map[string]map[string]any {
	t.Helper()
	return pluginRows(t, "duckdb", "dump", settings, stream, "the DuckDB table", func(line []byte, _ map[string]any) string {
		first := line[bytes.IndexByte(line, ':')+1:]
		return strings.TrimSpace(string(first[:bytes.IndexAny(first, ",}")]))
	})
}

// sameDuckValue compares a value DuckDB's to_json wrote with Arrow's JSON form of the source value: numbers
// and nested values through JSON, timestamps as instants (Arrow writes RFC 3339, DuckDB "2006-01-02
// 15:04:05.999999-07").
func sameDuckValue(duck, src any) bool {
	if a, ok := duck.(string); ok {
		if b, ok := src.(string); ok {
			ta, errA := time.Parse("2006-01-02 15:04:05.999999999-07", a)
			tb, errB := time.Parse(time.RFC3339Nano, b)
			if errA == nil && errB == nil {
				return ta.Equal(tb)
			}
		}
	}
	return reflect.DeepEqual(normalizeJSON(duck), normalizeJSON(src))
}
