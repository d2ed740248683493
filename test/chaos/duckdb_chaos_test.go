package chaos

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/test/harness"
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
	e := harness.NewEnv(t)
	gen := `{ seed: 33, rows: 30000, rows_per_second: 6000, batch_size: 500, nested: true, update_ratio: 0.2, delete_ratio: 0.05 }`
	settings := fmt.Sprintf(`{"path": %q, "schema": "analytics"}`, filepath.Join(e.Dir, "dest", "chaos.duckdb"))
	e.WriteConfig(fmt.Sprintf(`connections:
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
`, gen, settings, filepath.Join(e.Dir, "wal")))

	start := time.Now()
	e.KillSyncAtRandom(kills, 500*time.Millisecond, 2500*time.Millisecond)
	// The DuckDB plugin SIGKILLed alone, mid-apply or between applies: the engine restarts it and the new
	// process recovers the file from DuckDB's WAL.
	pluginKills := max(1, kills/3)
	for i := 0; i < pluginKills; i++ {
		e.KillPluginAtRandom("skippr-plugin-duckdb", 100*time.Millisecond, 1500*time.Millisecond)
	}
	e.MustRun("sync", "--once", "--wait-lock")

	got := harness.DumpDuckDB(t, settings, "events")
	want := harness.Want(t, gen)["events"]
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
	state := harness.DumpDuckDB(t, settings, "_skippr_state")
	var status []struct {
		WAL struct {
			LastCommitted uint64 `json:"last_committed"`
		} `json:"wal"`
	}
	if r := e.MustRun("status", "--json"); json.Unmarshal([]byte(r.Stdout), &status) != nil || len(status) != 1 {
		t.Fatalf("status --json: %s", r.Stdout)
	}
	if row, ok := state[`"orders"`]; !ok || fmt.Sprint(row["sequence"]) != fmt.Sprint(status[0].WAL.LastCommitted) {
		t.Fatalf("state table %v, WAL committed through %d", state, status[0].WAL.LastCommitted)
	}
	t.Logf("%d SIGKILLs of skippr sync, %d of the DuckDB plugin alone (%s after the builds); the DuckDB table's %d rows equal the source's; state %v",
		kills, pluginKills, time.Since(start).Round(time.Second), len(got), state)
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
	return reflect.DeepEqual(harness.NormalizeJSON(duck), harness.NormalizeJSON(src))
}
