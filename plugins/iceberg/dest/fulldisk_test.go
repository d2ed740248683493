package dest

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

// mountTmpfs mounts a tmpfs of the given size (mount(8) syntax: "8m") on dir for the test's life. It skips the
// test only where mounting is impossible: not root, or a container without CAP_SYS_ADMIN. CI runs as root.
func mountTmpfs(t *testing.T, dir, size string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a size-limited tmpfs (CI runs as root)")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) {
			t.Skipf("mount tmpfs on %s not permitted here (no CAP_SYS_ADMIN): %v", dir, err)
		}
		t.Fatalf("mount tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() {
		// Lazily, so that a catalog connection the test still holds cannot keep the mount alive.
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
}

func remountTmpfs(t *testing.T, dir, size string) {
	t.Helper()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_REMOUNT, "size="+size); err != nil {
		t.Fatalf("remount %s with size %s: %v", dir, size, err)
	}
}

func fullDiskSchema() *arrow.Schema {
	return change.Schema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "payload", Type: arrow.BinaryTypes.String, Nullable: true},
	}, []string{"id"})
}

// fullDiskRows is apply seq's rows: the first inserts 3000 keys; each later one updates 1000 of them, deletes
// 200 and inserts 2000 new ones, so data and equality delete files are written. Payloads are hex of a hash
// chain: about 2 bytes of Parquet per 4 characters, so every apply takes hundreds of KiB.
func fullDiskRows(seq int) []row {
	var (
		rows []row
		h    = uint64(seq)
	)
	payload := func() string {
		b := make([]byte, 0, 96)
		for range 12 {
			h = mix64(h + 0x9E3779B97F4A7C15)
			b = append(b, byte(h), byte(h>>8), byte(h>>16), byte(h>>24), byte(h>>32), byte(h>>40), byte(h>>48), byte(h>>56))
		}
		return hex.EncodeToString(b)
	}
	if seq == 1 {
		for id := range 3000 {
			rows = append(rows, r(opI, id, payload()))
		}
		return rows
	}
	firstNew := 3000 + (seq-2)*2000 // keys 0..firstNew-1 were inserted before
	for i := range 1000 {
		rows = append(rows, r(opU, (seq*7919+i*31)%firstNew, payload()))
	}
	for i := range 200 {
		rows = append(rows, r(opD, (seq*104729+i*53+5)%firstNew, nil))
	}
	for id := firstNew; id < firstNew+2000; id++ {
		rows = append(rows, r(opI, id, payload()))
	}
	return rows
}

// TestFullDisk fills the warehouse's file system during applies. The failing apply must say the disk is full,
// leave LastApplied and the table at the last sequence that committed, and leave no file of its own behind;
// once there is room again, the same sequence must commit exactly once. The catalog sits either on the full
// disk (the default WAREHOUSE/catalog.db) or on another one, which moves where the apply fails.
func TestFullDisk(t *testing.T) {
	cases := []struct {
		name             string
		catalogElsewhere bool
	}{
		{name: "catalog on the full disk"},
		{name: "catalog on another disk", catalogElsewhere: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			wh := filepath.Join(dir, "wh")
			mountTmpfs(t, wh, "8m")
			extra := map[string]any{}
			if tc.catalogElsewhere {
				extra["catalog"] = map[string]any{"warehouse": wh, "path": filepath.Join(dir, "catalog.db")}
			}
			e := newEnvAt(t, dir, extra)
			sc := fullDiskSchema()
			const stream = "items"

			var (
				failed  int
				failure error
				itemsOf = map[int][]serve.Item{}
			)
			for seq := 1; seq <= 100; seq++ {
				itemsOf[seq] = items(stream, batch(t, sc, fullDiskRows(seq)...))
				_, err := e.d.Apply(ctxT(t), serve.ApplyRequest{Settings: e.raw, Pipeline: e.pipeline, Sequence: uint64(seq), Items: itemsOf[seq]})
				if err != nil {
					failed, failure = seq, err
					break
				}
				e.fold(itemsOf[seq]...)
			}
			if failed == 0 {
				t.Fatal("100 applies fit in an 8 MiB tmpfs: the test never filled the disk")
			}
			if failed == 1 {
				t.Fatalf("the first apply already failed, nothing to keep: %v", failure)
			}
			t.Logf("apply %d failed: %v", failed, failure)
			checkFullDiskError(t, failure, failed)
			if !strings.Contains(failure.Error(), "table "+stream) {
				t.Errorf("error does not name table %s: %v", stream, failure)
			}

			// Nothing past the last commit is reported, and the table holds exactly what committed.
			a := e.lastApplied()
			if a.Sequence != uint64(failed-1) {
				t.Errorf("LastApplied().Sequence = %d after apply %d failed, want %d", a.Sequence, failed, failed-1)
			}
			switch a.Streams[stream] {
			case uint64(failed - 1):
			case uint64(failed):
				// The table's commit went through and only the completion marker failed: the table holds the
				// sequence, and the replay below must skip it there.
				e.fold(itemsOf[failed]...)
			default:
				t.Errorf("table fence = %d after apply %d failed", a.Streams[stream], failed)
			}
			checkScan(t, e, stream)
			checkNoOrphans(t, e, stream)

			remountTmpfs(t, wh, "64m")
			res, err := e.d.Apply(ctxT(t), serve.ApplyRequest{Settings: e.raw, Pipeline: e.pipeline, Sequence: uint64(failed), Items: itemsOf[failed]})
			if err != nil {
				t.Fatalf("apply %d again with room on the disk: %v", failed, err)
			}
			if a.Streams[stream] != uint64(failed) {
				if res.Skipped {
					t.Fatalf("apply %d again: skipped, but it never committed", failed)
				}
				e.fold(itemsOf[failed]...)
			}
			next := items(stream, batch(t, sc, fullDiskRows(failed+1)...))
			e.apply(uint64(failed+1), next...)
			if a := e.lastApplied(); a.Sequence != uint64(failed+1) || a.Streams[stream] != uint64(failed+1) {
				t.Errorf("LastApplied = %+v, want sequence %d everywhere", a, failed+1)
			}
			checkScan(t, e, stream)
			checkNoOrphans(t, e, stream)

			// The disk filled while the data file was written, the first and largest file of an apply. Now fill
			// it at the later steps: before the catalog commit (the catalog writes the table's new metadata
			// file), with room for that file only (SQLite then needs pages, when it shares the disk), and after
			// the table's commit (the completion marker).
			stages := []struct {
				name string
				// must: the apply cannot succeed; otherwise whether it fails depends on where the catalog is
				// and how much room SQLite's log already holds.
				must   bool
				before func() // runs before the apply
				hooks  hooks
			}{
				{name: "data file", must: true, before: func() { fill(t, wh, 0) }},
				{name: "table metadata", must: true, hooks: hooks{beforeCommit: func(string, int) error {
					fill(t, wh, 0)
					return nil
				}}},
				{name: "catalog database", hooks: hooks{beforeCommit: func(tableName string, _ int) error {
					fill(t, wh, metadataSize(t, e, tableName)+4<<10)
					return nil
				}}},
				{name: "completion marker", hooks: hooks{afterCommit: func(string) error {
					fill(t, wh, 0)
					return nil
				}}},
			}
			seq := failed + 2
			for _, st := range stages {
				its := items(stream, batch(t, sc, fullDiskRows(seq)...))
				if st.before != nil {
					st.before()
				}
				e.d.hooks = st.hooks
				_, err := e.d.Apply(ctxT(t), serve.ApplyRequest{Settings: e.raw, Pipeline: e.pipeline, Sequence: uint64(seq), Items: its})
				e.d.hooks = hooks{}
				t.Logf("disk full at the %s: apply %d: %v", st.name, seq, err)
				switch {
				case err != nil:
					checkFullDiskError(t, err, seq)
					a := e.lastApplied()
					if a.Sequence != uint64(seq-1) {
						t.Errorf("LastApplied().Sequence = %d after apply %d failed, want %d", a.Sequence, seq, seq-1)
					}
					if a.Streams[stream] == uint64(seq) {
						e.fold(its...)
					} else if a.Streams[stream] != uint64(seq-1) {
						t.Errorf("table fence = %d after apply %d failed", a.Streams[stream], seq)
					}
					checkScan(t, e, stream)
					checkNoOrphans(t, e, stream)
					unfill(t, wh)
					res, err := e.d.Apply(ctxT(t), serve.ApplyRequest{Settings: e.raw, Pipeline: e.pipeline, Sequence: uint64(seq), Items: its})
					if err != nil {
						t.Fatalf("apply %d again with room on the disk: %v", seq, err)
					}
					if !res.Skipped && a.Streams[stream] != uint64(seq) {
						e.fold(its...)
					}
				case st.must:
					t.Fatalf("apply %d succeeded on a full disk", seq)
				default:
					unfill(t, wh)
					e.fold(its...)
				}
				if a := e.lastApplied(); a.Sequence != uint64(seq) || a.Streams[stream] != uint64(seq) {
					t.Errorf("LastApplied = %+v, want sequence %d everywhere", a, seq)
				}
				checkScan(t, e, stream)
				checkNoOrphans(t, e, stream)
				seq++
			}
		})
	}
}

// checkFullDiskError says the error of apply seq names the sequence, the table and the full disk.
func checkFullDiskError(t *testing.T, err error, seq int) {
	t.Helper()
	msg := err.Error()
	if !errors.Is(err, syscall.ENOSPC) && !strings.Contains(msg, "no space left on device") && !strings.Contains(msg, "disk is full") {
		t.Errorf("error does not say the disk is full: %v", err)
	}
	if !strings.Contains(msg, "apply "+strconv.Itoa(seq)+":") {
		t.Errorf("error does not name apply %d: %v", seq, err)
	}
	// Which file or catalog: a path, either the file that could not be written or the catalog's database.
	if !strings.Contains(msg, "/") {
		t.Errorf("error names no file or catalog: %v", err)
	}
}

// metadataSize is the size of a table's current metadata file: about what its next commit writes.
func metadataSize(t *testing.T, e *env, tableName string) int64 {
	t.Helper()
	fi, err := os.Stat(strings.TrimPrefix(e.table(tableName).MetadataLocation(), "file://"))
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

func freeBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatalf("statfs %s: %v", dir, err)
	}
	return int64(st.Bavail) * st.Bsize
}

// fill takes all free space of dir's file system but left bytes.
func fill(t *testing.T, dir string, left int64) {
	t.Helper()
	n := freeBytes(t, dir) - left
	if n <= 0 {
		return
	}
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Fallocate(int(f.Fd()), 0, 0, n); err != nil {
		t.Fatalf("fallocate %d bytes in %s: %v", n, dir, err)
	}
}

func unfill(t *testing.T, dir string) {
	t.Helper()
	if err := os.Remove(filepath.Join(dir, "filler")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
}

// checkScan reads the table back with Scan, the lake's own reader, and compares it with everything folded.
func checkScan(t *testing.T, e *env, stream string) {
	t.Helper()
	got := map[string]map[string]any{}
	err := Scan(ctxT(t), e.raw, stream, func(rec arrow.RecordBatch) error {
		for i := 0; i < int(rec.NumRows()); i++ {
			vals := map[string]any{}
			for j, f := range rec.Schema().Fields() {
				vals[f.Name] = rec.Column(j).GetOneForMarshal(i)
			}
			k, err := json.Marshal(vals["id"])
			if err != nil {
				return err
			}
			key := string(k)
			if _, dup := got[key]; dup {
				t.Errorf("table %s holds key %s twice", stream, key)
			}
			got[key] = normalize(t, vals).(map[string]any)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("scan %s: %v", stream, err)
	}
	want := map[string]map[string]any{}
	for k, v := range e.expected[stream] {
		want[k] = normalize(t, v).(map[string]any)
	}
	if !reflect.DeepEqual(got, want) {
		var missing, extra, differ int
		for k, v := range want {
			g, ok := got[k]
			switch {
			case !ok:
				missing++
			case !reflect.DeepEqual(g, v):
				differ++
			}
		}
		for k := range got {
			if _, ok := want[k]; !ok {
				extra++
			}
		}
		t.Fatalf("table %s: %d rows, want %d: %d missing, %d extra, %d differ", stream, len(got), len(want), missing, extra, differ)
	}
}

// checkNoOrphans says every file in the table's data directory is a live data or delete file of the table:
// a failed apply removed what it wrote, and the table references no file that is missing.
func checkNoOrphans(t *testing.T, e *env, stream string) {
	t.Helper()
	tbl := e.table(stream)
	data, deletes := tableFiles(t, tbl)
	live := map[string]bool{}
	for _, f := range append(data, deletes...) {
		live[strings.TrimPrefix(f, "file://")] = true
	}
	var onDisk []string
	dataDir := filepath.Join(strings.TrimPrefix(tbl.Location(), "file://"), "data")
	err := filepath.WalkDir(dataDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			onDisk = append(onDisk, p)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", dataDir, err)
	}
	for _, p := range onDisk {
		if !live[p] {
			t.Errorf("file %s is in the table's data directory but not in the table", p)
		}
	}
	for p := range live {
		if !slices.Contains(onDisk, p) {
			t.Errorf("the table references %s, which is not on disk", p)
		}
	}
	t.Logf("%d live files in %s", len(live), dataDir)
}
