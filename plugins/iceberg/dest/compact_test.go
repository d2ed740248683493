package dest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

func TestCompactFoldsDeletesAndExpiresSnapshots(t *testing.T) {
	for _, partitions := range [][]string{nil, {"day(ts)"}} {
		t.Run(map[bool]string{true: "unpartitioned", false: "day(ts)"}[partitions == nil], func(t *testing.T) {
			e := newEnv(t, map[string]any{"partitions": map[string]any{"events": partitions}})
			sc := eventsSchema()
			day := func(d int) time.Time { return time.Date(2026, 1, d, 0, 0, 0, 0, time.UTC) }
			e.apply(1, schemaItem("events", sc))
			for seq := 2; seq <= 6; seq++ {
				var rows []row
				for id := 1; id <= 8; id++ {
					switch {
					case seq == 2:
						rows = append(rows, r(opI, id, day(id%3+1), "eu", id))
					case id%seq == 0:
						rows = append(rows, r(opD, id, nil, nil, nil))
					case id%2 == seq%2:
						rows = append(rows, r(opU, id, day(seq), "us", id*seq))
					}
				}
				rows = append(rows, r(opI, 100+seq, day(seq), "eu", seq))
				e.apply(uint64(seq), items("events", batch(t, sc, rows...))...)
			}
			e.check("events", "events", "id")
			data, deletes := tableFiles(t, e.table("events"))
			if len(data) < 3 || len(deletes) == 0 {
				t.Fatalf("setup: %d data files, %d delete files; want several of each", len(data), len(deletes))
			}
			before := e.lastApplied()
			// A crash between writing files and committing leaves files nothing references: old ones go, recent
			// ones (perhaps a running writer's) stay.
			dataDir := filepath.Join(strings.TrimPrefix(e.table("events").Location(), "file://"), "data")
			oldOrphan, newOrphan := filepath.Join(dataDir, "crashed-old.parquet"), filepath.Join(dataDir, "crashed-new.parquet")
			for _, p := range []string{oldOrphan, newOrphan} {
				if err := os.WriteFile(p, []byte("PAR1"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			past := time.Now().Add(-100 * time.Hour)
			if err := os.Chtimes(oldOrphan, past, past); err != nil {
				t.Fatal(err)
			}

			res, err := Compact(ctxT(t), e.raw, "events", CompactOptions{ExpireOlderThan: time.Nanosecond, RetainLast: 1})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%+v", res)
			e.check("events", "events", "id")
			tbl := e.table("events")
			data, deletes = tableFiles(t, tbl)
			if len(deletes) != 0 || res.RemovedEqualityDeleteFiles == 0 {
				t.Fatalf("after compaction %d delete files remain (removed %d)", len(deletes), res.RemovedEqualityDeleteFiles)
			}
			if n := len(tbl.Metadata().Snapshots()); n != 1 || res.SnapshotsAfter != 1 {
				t.Fatalf("%d snapshots after expiry, want 1", n)
			}
			if _, err := os.Stat(oldOrphan); !os.IsNotExist(err) {
				t.Fatalf("old orphan still there (%v); deleted %q", err, res.DeletedOrphans)
			}
			if err := os.Remove(newOrphan); err != nil {
				t.Fatalf("recent orphan: %v", err)
			}
			live := slices.Compact(slices.Sorted(slices.Values(data)))
			if on := parquetFiles(t, tbl.Location()); !slices.Equal(on, live) {
				t.Fatalf("files on disk after expiry:\n%q\nlive:\n%q", on, live)
			}
			if after := e.lastApplied(); after.Sequence != before.Sequence || after.Streams["events"] != before.Streams["events"] {
				t.Fatalf("compaction moved LastApplied: %+v -> %+v", before, after)
			}
			// Changes after compaction still replace the compacted rows.
			e.apply(7, items("events", batch(t, sc, r(opU, 1, day(9), "xx", 1), r(opD, 7, nil, nil, nil), r(opU, 106, day(9), "xx", 0)))...)
			if res := e.apply(7, []serve.Item{}...); !res.Skipped {
				t.Fatal("replay of 7 after compaction not skipped")
			}
			e.check("events", "events", "id")
		})
	}
}

// With auto_compact, an apply that leaves a table over the limits compacts it; the contents stay exact and
// the files stay bounded.
func TestAutoCompact(t *testing.T) {
	e := newEnv(t, map[string]any{"auto_compact": map[string]any{"max_data_files": 3, "max_delete_files": 2}})
	sc := eventsSchema()
	day := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	e.apply(1, schemaItem("events", sc))
	maxData, maxDeletes := 0, 0
	for seq := 2; seq <= 12; seq++ {
		rows := []row{r(opI, 100+seq, day, "eu", seq)}
		for id := 100; id < 100+seq; id += 2 {
			rows = append(rows, r(opU, id, day, "us", id*seq))
		}
		if seq%4 == 0 {
			rows = append(rows, r(opD, 100+seq-1, nil, nil, nil))
		}
		e.apply(uint64(seq), items("events", batch(t, sc, rows...))...)
		data, deletes := tableFiles(t, e.table("events"))
		maxData, maxDeletes = max(maxData, len(data)), max(maxDeletes, len(deletes))
	}
	e.check("events", "events", "id")
	// After an apply the table holds at most the limit plus what that one apply added, before it compacts.
	if maxData > 4 || maxDeletes > 3 {
		t.Fatalf("the table reached %d data files and %d delete files; auto_compact should keep it near 3 and 2", maxData, maxDeletes)
	}
	if a := e.lastApplied(); a.Sequence != 12 {
		t.Fatalf("last applied %+v after auto compaction, want 12", a)
	}
}
