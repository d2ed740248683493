package main_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/internal/testplugins"
)

// TestDatagenToIcebergSurvivesSIGKILL runs datagen (inserts, updates, deletes, nested columns) into the
// embedded Iceberg lake through `skippr sync`, SIGKILLing the engine at random moments — during reads,
// WAL commits, Parquet writes and Iceberg commits alike — then scans the table (deletes applied) and
// compares it with what the source produced, row by row. The lake is behind the source (an Iceberg commit
// takes longer than a WAL commit), so it takes coalesced ranges of entries, bounded by a small max_bytes so that
// kills land inside ranges of different shapes and restarts replay parts of them.
func TestDatagenToIcebergSurvivesSIGKILL(t *testing.T) {
	e := newEnv(t)
	gen := `{ seed: 21, rows: 30000, rows_per_second: 6000, batch_size: 500, nested: true, update_ratio: 0.2, delete_ratio: 0.05 }`
	lakeSettings := fmt.Sprintf(`{"catalog": {"warehouse": %q}, "namespace": "lake"}`, filepath.Join(e.dir, "lake"))
	e.writeDatagenLakeConfig(gen, lakeSettings, "128KiB", "{ max_bytes: 512KiB, max_interval: 400ms }")

	kills := 10
	e.killSyncAtRandom(kills, 500*time.Millisecond, 2500*time.Millisecond)
	e.mustRun("sync", "--once")
	fences := snapshotFences(t, filepath.Join(e.dir, "lake", "lake.db", "events"), "orders")
	ranges := 0
	for i := 1; i < len(fences); i++ {
		if fences[i] <= fences[i-1] {
			t.Fatalf("snapshot fences do not increase: %v", fences)
		}
		if fences[i] > fences[i-1]+1 {
			ranges++
		}
	}
	// max_interval makes the lake gather entries even when it keeps up (a quiet machine), so ranges happen.
	if ranges == 0 {
		t.Fatalf("no snapshot covered a range of entries (fences %v): coalescing was not exercised", fences)
	}
	t.Logf("%d snapshots up to entry %d, %d of them ranges", len(fences), fences[len(fences)-1], ranges)
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

	n := lakeEqualsSource(t, lakeSettings, gen)
	t.Logf("%d SIGKILLs; the lake's %d rows equal the source's", kills, n)
}

// TestCompactionBesideRunningSync compacts the lake table again and again while a sync keeps committing to
// it: each compaction commits (re-planned when it loses a race with an apply), and the table ends equal to
// the source row by row.
func TestCompactionBesideRunningSync(t *testing.T) {
	e := newEnv(t)
	gen := `{ seed: 22, rows: 40000, rows_per_second: 4000, batch_size: 500, update_ratio: 0.3, delete_ratio: 0.1 }`
	lakeSettings := e.datagenToLake(gen, "64KiB")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sync := e.cmd(ctx, "sync")
	var syncErr bytes.Buffer
	sync.Stderr = &syncErr
	if err := sync.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	compactions := 0
	for i := 0; i < 4; i++ {
		r := e.mustRun("lake", "compact", "events", "--expire-older-than", "1ns", "--retain-last", "3")
		var res struct{ RemovedDataFiles, AddedDataFiles int }
		if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
			t.Fatalf("lake compact output: %v\n%s", err, r.stdout)
		}
		if res.RemovedDataFiles > 0 {
			compactions++
		}
		time.Sleep(time.Second)
	}
	if compactions == 0 {
		t.Fatalf("no compaction rewrote anything while the sync was writing small files")
	}
	sync.Process.Signal(syscall.SIGTERM)
	if err := sync.Wait(); err != nil {
		t.Fatalf("sync: %v\n%s", err, syncErr.String())
	}
	e.mustRun("sync", "--once")
	n := lakeEqualsSource(t, lakeSettings, gen)
	t.Logf("%d compactions beside the sync; the lake's %d rows equal the source's", compactions, n)
}

// datagenToLake writes a config of one pipeline, datagen (settings gen) → the embedded lake, with WAL entries
// of up to maxBytes, and returns the lake's settings.
func (e *env) datagenToLake(gen, maxBytes string) string {
	lakeSettings := fmt.Sprintf(`{"catalog": {"warehouse": %q}, "namespace": "lake"}`, filepath.Join(e.dir, "lake"))
	e.writeDatagenLakeConfig(gen, lakeSettings, maxBytes)
	return lakeSettings
}

// writeDatagenLakeConfig writes a config of one pipeline, datagen (settings gen) → iceberg (lakeSettings, one
// line of YAML flow or JSON), with a local WAL of entries of up to maxBytes, and the lake's apply limits if
// given (one line of YAML flow).
func (e *env) writeDatagenLakeConfig(gen, lakeSettings, maxBytes string, lakeApply ...string) {
	apply := ""
	if len(lakeApply) > 0 {
		apply = "\n    apply: " + lakeApply[0]
	}
	e.writeConfig(fmt.Sprintf(`connections:
  gen:
    plugin: datagen
    version: "~> 0.1"
    settings: %s
  lake:
    plugin: iceberg
    version: "~> 0.1"
    settings: %s%s
pipelines:
  orders:
    source: gen
    destinations: [lake]
    wal:
      url: file://%s
      group_commit: { max_bytes: %s, max_delay: 100ms }
`, gen, lakeSettings, apply, filepath.Join(e.dir, "wal"), maxBytes))
}

// snapshotFences reads the newest metadata file of the Iceberg table in dir and returns, in order, the WAL
// entry each of its snapshots records for pipeline (the fence an apply commits with its data).
func snapshotFences(t *testing.T, dir, pipeline string) []uint64 {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "metadata", "*.metadata.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("metadata of %s: %v (%d files)", dir, err, len(files))
	}
	slices.Sort(files) // named NNNNN-uuid: the newest sorts last
	b, err := os.ReadFile(files[len(files)-1])
	if err != nil {
		t.Fatal(err)
	}
	var md struct {
		Snapshots []struct {
			Timestamp int64             `json:"timestamp-ms"`
			Summary   map[string]string `json:"summary"`
		} `json:"snapshots"`
	}
	if err := json.Unmarshal(b, &md); err != nil {
		t.Fatalf("%s: %v", files[len(files)-1], err)
	}
	var out []uint64
	for _, s := range md.Snapshots {
		v, ok := s.Summary["skippr.pipeline."+pipeline+".sequence"]
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("snapshot fence %q: %v", v, err)
		}
		out = append(out, n)
	}
	return out
}

// lakeEqualsSource compares the lake table events with what datagen settings gen produce, row by row, and
// returns the row count.
func lakeEqualsSource(t *testing.T, lakeSettings, gen string) int {
	t.Helper()
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
	return len(got)
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
	return pluginRows(t, "iceberg", "scan", lakeSettings, stream, "the lake table", func(_ []byte, row map[string]any) string {
		return fmt.Sprint(row["id"]) // a json.Number: the digits as written
	})
}

// pluginRows runs a plugin binary's read-back subcommand (settings on stdin) for stream and returns its JSON
// lines keyed by key(line, row); numbers stay json.Numbers. A key held twice fails the test, naming what.
func pluginRows(t *testing.T, plugin, subcommand, settings, stream, what string, key func(line []byte, row map[string]any) string) map[string]map[string]any {
	t.Helper()
	return pluginRowsWith(t, nil, plugin, subcommand, settings, stream, what, key)
}

// pluginRowsWith is pluginRows with the command passed through wrap first (to run it in a network namespace).
func pluginRowsWith(t *testing.T, wrap func(*exec.Cmd) error, plugin, subcommand, settings, stream, what string, key func(line []byte, row map[string]any) string) map[string]map[string]any {
	t.Helper()
	cmd := exec.Command(testplugins.Build(t, plugin), subcommand, stream)
	if wrap != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := wrap(cmd); err != nil {
			t.Fatal(err)
		}
	}
	cmd.Stdin = strings.NewReader(settings)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s", subcommand, stream, err, errb.String())
	}
	got := map[string]map[string]any{}
	sc := bufio.NewScanner(&out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var row map[string]any
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.UseNumber()
		if err := dec.Decode(&row); err != nil {
			t.Fatalf("%s %s: %v: %s", subcommand, stream, err, sc.Text())
		}
		k := key(sc.Bytes(), row)
		if _, dup := got[k]; dup {
			t.Fatalf("%s %s holds key %s twice", what, stream, k)
		}
		got[k] = row
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}
