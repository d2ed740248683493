package main_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/internal/testplugins"
)

// TestDatagenToIcebergSurvivesSIGKILL runs datagen (inserts, updates, deletes, nested columns) into the
// embedded Iceberg lake through `skippr sync`, SIGKILLing the engine at random moments — during reads,
// WAL commits, Parquet writes and Iceberg commits alike — then scans the table (deletes applied) and
// compares it with what the source produced, row by row.
func TestDatagenToIcebergSurvivesSIGKILL(t *testing.T) {
	e := newEnv(t)
	lakeDir := filepath.Join(e.dir, "lake")
	gen := `{ seed: 21, rows: 30000, rows_per_second: 6000, batch_size: 500, nested: true, update_ratio: 0.2, delete_ratio: 0.05 }`
	lakeSettings := fmt.Sprintf(`{"catalog": {"warehouse": %q}, "namespace": "lake"}`, lakeDir)
	e.writeConfig(fmt.Sprintf(`connections:
  gen:
    plugin: datagen
    version: "~> 0.1"
    settings: %s
  lake:
    plugin: iceberg
    version: "~> 0.1"
    settings: %s
pipelines:
  orders:
    source: gen
    destinations: [lake]
    wal:
      url: file://%s
      group_commit: { max_bytes: 128KiB, max_delay: 100ms }
`, gen, lakeSettings, filepath.Join(e.dir, "wal")))

	kills := 10
	e.killSyncAtRandom(kills, 500*time.Millisecond, 2500*time.Millisecond)
	e.mustRun("sync", "--once")
	// Compaction folds the deletes into the data files; the table must read the same afterwards.
	r := e.mustRun("lake", "compact", "events", "--expire-older-than", "1ns", "--retain-last", "1")
	var compacted struct {
		RemovedDataFiles, AddedDataFiles, RemovedEqualityDeleteFiles, SnapshotsAfter int
	}
	if err := json.Unmarshal([]byte(r.stdout), &compacted); err != nil {
		t.Fatalf("lake compact output: %v\n%s", err, r.stdout)
	}
	if compacted.RemovedDataFiles == 0 || compacted.RemovedEqualityDeleteFiles == 0 || compacted.SnapshotsAfter != 1 {
		t.Fatalf("compaction of a table with many small files and deletes did nothing: %s", r.stdout)
	}

	got := scanLake(t, lakeSettings, "events")
	want := want(t, gen)["events"]
	if len(got) != len(want) {
		t.Fatalf("lake has %d rows, source produced %d", len(got), len(want))
	}
	for k, w := range want {
		g := got[k]
		for col, v := range w {
			if !reflect.DeepEqual(normalizeJSON(g[col]), normalizeJSON(v)) {
				t.Fatalf("id %s column %s: lake %v, source %v", k, col, g[col], v)
			}
		}
	}
	t.Logf("%d SIGKILLs; the lake's %d rows equal the source's", kills, len(got))
}

// normalizeJSON passes a value through JSON so numbers and nested values compare alike.
func normalizeJSON(v any) any {
	b, _ := json.Marshal(v)
	var out any
	json.Unmarshal(b, &out)
	return out
}

// scanLake reads a lake table (deletes applied) with the iceberg plugin binary itself, outside the engine,
// keyed by the id column's digits; a key held twice fails the test.
func scanLake(t *testing.T, lakeSettings, stream string) map[string]map[string]any {
	t.Helper()
	scan := exec.Command(testplugins.Build(t, "iceberg"), "scan", stream)
	scan.Stdin = strings.NewReader(lakeSettings)
	var out, errb bytes.Buffer
	scan.Stdout, scan.Stderr = &out, &errb
	if err := scan.Run(); err != nil {
		t.Fatalf("scan: %v\n%s", err, errb.String())
	}
	got := map[string]map[string]any{}
	sc := bufio.NewScanner(&out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var row map[string]any
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.UseNumber()
		if err := dec.Decode(&row); err != nil {
			t.Fatal(err)
		}
		key := fmt.Sprint(row["id"]) // a json.Number: the digits as written
		if _, dup := got[key]; dup {
			t.Fatalf("the lake table %s holds id %s twice", stream, key)
		}
		got[key] = row
	}
	return got
}
