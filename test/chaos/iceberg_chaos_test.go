package chaos

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/test/harness"
)

// TestDatagenToIcebergSurvivesSIGKILL runs datagen (inserts, updates, deletes, nested columns) into the
// embedded Iceberg lake through `skippr sync`, SIGKILLing the engine at random moments — during reads,
// WAL commits, Parquet writes and Iceberg commits alike — then scans the table (deletes applied) and
// compares it with what the source produced, row by row. The lake is behind the source (an Iceberg commit
// takes longer than a WAL commit), so it takes coalesced ranges of entries, bounded by a small max_bytes so that
// kills land inside ranges of different shapes and restarts replay parts of them.
func TestDatagenToIcebergSurvivesSIGKILL(t *testing.T) {
	e := harness.NewEnv(t)
	gen := `{ seed: 21, rows: 30000, rows_per_second: 6000, batch_size: 500, nested: true, update_ratio: 0.2, delete_ratio: 0.05 }`
	lakeSettings := fmt.Sprintf(`{"catalog": {"warehouse": %q}, "namespace": "lake"}`, filepath.Join(e.Dir, "lake"))
	e.WriteDatagenLakeConfig(gen, lakeSettings, "128KiB", "{ max_bytes: 512KiB, max_interval: 400ms }")

	kills := 10
	e.KillSyncAtRandom(kills, 500*time.Millisecond, 2500*time.Millisecond)
	e.MustRun("sync", "--once")
	fences := snapshotFences(t, filepath.Join(e.Dir, "lake", "lake.db", "events"), "orders")
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
	r := e.MustRun("lake", "compact", "events", "--expire-older-than", "1ns", "--retain-last", "1")
	var compacted struct {
		RemovedDataFiles, AddedDataFiles, RemovedEqualityDeleteFiles, SnapshotsAfter int
	}
	if err := json.Unmarshal([]byte(r.Stdout), &compacted); err != nil {
		t.Fatalf("lake compact output: %v\n%s", err, r.Stdout)
	}
	if compacted.RemovedDataFiles == 0 || compacted.RemovedEqualityDeleteFiles == 0 || compacted.SnapshotsAfter != 1 {
		t.Fatalf("compaction of a table with many small files and deletes did nothing: %s", r.Stdout)
	}

	n := harness.LakeEqualsSource(t, lakeSettings, gen)
	t.Logf("%d SIGKILLs; the lake's %d rows equal the source's", kills, n)
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
