package filedest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

var testSchema = change.Schema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "name", Type: arrow.BinaryTypes.String},
}, []string{"id"})

// batch builds a change batch of n upserts with ids from, from+1, ... and a name of pad bytes each.
func batch(from, n, pad int) arrow.RecordBatch {
	b := change.NewBuilder(memory.DefaultAllocator, testSchema)
	defer b.Release()
	name := strings.Repeat("x", pad)
	for i := range n {
		b.Field(0).(*array.Int64Builder).Append(int64(from + i))
		b.Field(1).(*array.StringBuilder).Append(name)
		b.Row(change.OpInsert, "")
	}
	return b.NewBatch()
}

// entries yields, for each entry first..last, one batch of rows rows (ids continuing across entries), built
// as it is asked for, as the SDK does with the engine's stream. each, if set, runs before each entry.
func entries(first, last uint64, rows int, each func(seq uint64)) iter.Seq2[serve.Item, error] {
	return func(yield func(serve.Item, error) bool) {
		for seq := first; seq <= last; seq++ {
			if each != nil {
				each(seq)
			}
			rec := batch(int(seq-1)*rows, rows, 100)
			ok := yield(serve.Item{Stream: "t", Record: rec, Sequence: seq}, nil)
			rec.Release()
			if !ok {
				return
			}
		}
	}
}

func open(t *testing.T, dir string) *session {
	t.Helper()
	x, err := (&Destination{}).Open(context.Background(), json.RawMessage(fmt.Sprintf(`{"dir": %q}`, dir)))
	if err != nil {
		t.Fatal(err)
	}
	return x.(*session)
}

func apply(t *testing.T, x *session, first, last uint64, items iter.Seq2[serve.Item, error]) serve.ApplyResult {
	t.Helper()
	res, err := x.Apply(context.Background(), serve.NewRange(serve.ApplyRequest{Pipeline: "p", FirstSequence: first, Sequence: last}, items))
	if err != nil {
		t.Fatalf("apply %d..%d: %v", first, last, err)
	}
	return res
}

// TestApplyStreamsRange applies one range of 200k rows (≈ 25 MiB of JSON, several times that as Go values)
// and checks, at every entry, that the live heap has not grown with the range: the rows are on disk, not in
// memory, before the range ends.
func TestApplyStreamsRange(t *testing.T) {
	const (
		nEntries = 100
		rows     = 2000
		limit    = 16 << 20 // a frame (1 MiB), a batch, JSON buffers: far below the range
	)
	dir := t.TempDir()
	x := open(t, dir)
	live := func() int64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	base := live()
	var peak int64
	res := apply(t, x, 1, nEntries, entries(1, nEntries, rows, func(seq uint64) {
		if seq%10 == 0 {
			peak = max(peak, live()-base)
		}
	}))
	if res.Rows != nEntries*rows {
		t.Fatalf("applied %d rows, want %d", res.Rows, nEntries*rows)
	}
	fi, err := os.Stat(filepath.Join(dir, logName))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("range of %d rows, log %d MiB, live heap grew at most %d KiB", nEntries*rows, fi.Size()>>20, peak>>10)
	if peak > limit {
		t.Errorf("the live heap grew by %d MiB while applying one range (log %d MiB): the range is held in memory, want ≤ %d MiB",
			peak>>20, fi.Size()>>20, limit>>20)
	}
	st, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Tables["t"]) != nEntries*rows || st.Applies["p"] != 1 || len(st.Sequences["p"]) != nEntries {
		t.Errorf("loaded %d rows, %d applies, %d entries; want %d, 1, %d", len(st.Tables["t"]), st.Applies["p"], len(st.Sequences["p"]), nEntries*rows, nEntries)
	}
}

// TestFenceWithoutLog: the fence comes from the commit record, not from reading the log, so a fresh process
// knows it even when the log's first bytes are unreadable (an implementation that scans the log sees nothing).
func TestFenceWithoutLog(t *testing.T) {
	dir := t.TempDir()
	apply(t, open(t, dir), 1, 3, entries(1, 3, 5, nil))
	f, err := os.OpenFile(filepath.Join(dir, logName), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(make([]byte, 8), 0); err != nil {
		t.Fatal(err)
	}
	f.Close()

	x := open(t, dir) // a new process
	la, err := x.LastApplied(context.Background(), "p")
	if err != nil {
		t.Fatal(err)
	}
	if la.Sequence != 3 || la.Streams["t"] != 3 {
		t.Fatalf("last applied: %+v, want sequence 3 and stream t at 3", la)
	}
	if res := apply(t, x, 2, 3, entries(2, 3, 5, nil)); !res.Skipped {
		t.Errorf("a replay of 2..3 was applied again")
	}
	// Load reads the log and must say where it is damaged instead of returning less.
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "offset 0") {
		t.Errorf("Load of a damaged log: %v, want an error naming offset 0", err)
	}
}

// TestCrashWindows stops an apply at each point where a SIGKILL can land and checks that the replay the engine
// then sends leaves every entry applied once: the data and the fence commit together.
func TestCrashWindows(t *testing.T) {
	crash := errors.New("crash")
	tests := []struct {
		name string
		// stop makes the apply of 4..6 stop; it reports whether the apply committed before stopping.
		stop      func(x *session) iter.Seq2[serve.Item, error]
		committed bool
	}{
		{name: "stream broken mid-range", stop: func(x *session) iter.Seq2[serve.Item, error] {
			return func(yield func(serve.Item, error) bool) {
				for it := range entries(4, 5, 50, nil) {
					if !yield(it, nil) {
						return
					}
				}
				yield(serve.Item{}, crash)
			}
		}},
		{name: "log synced, commit record not written", stop: func(x *session) iter.Seq2[serve.Item, error] {
			x.beforeCommit = func() error { return crash }
			return entries(4, 6, 50, nil)
		}},
		{name: "commit record half written", stop: func(x *session) iter.Seq2[serve.Item, error] {
			x.beforeCommit = func() error {
				if err := os.WriteFile(filepath.Join(x.s.Dir, stateName+".tmp"), []byte(`{"size": 99`), 0o644); err != nil {
					return err
				}
				return crash
			}
			return entries(4, 6, 50, nil)
		}},
		{name: "committed, result lost", committed: true, stop: func(x *session) iter.Seq2[serve.Item, error] {
			return entries(4, 6, 50, nil)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			apply(t, open(t, dir), 1, 3, entries(1, 3, 50, nil))
			before, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			x := open(t, dir)
			_, err = x.Apply(context.Background(), serve.NewRange(serve.ApplyRequest{Pipeline: "p", FirstSequence: 4, Sequence: 6}, tt.stop(x)))
			if tt.committed != (err == nil) {
				t.Fatalf("apply 4..6: %v", err)
			}
			mid, err := Load(dir)
			if err != nil {
				t.Fatalf("load after the crash: %v", err)
			}
			if !tt.committed && !reflect.DeepEqual(mid, before) {
				t.Errorf("an apply that did not commit shows: %v entries, %d rows; want %v, %d", mid.Sequences, mid.Rows, before.Sequences, before.Rows)
			}

			x = open(t, dir) // the process after the restart
			res := apply(t, x, 4, 6, entries(4, 6, 50, nil))
			if res.Skipped != tt.committed {
				t.Errorf("replay of 4..6: skipped %v, want %v", res.Skipped, tt.committed)
			}
			apply(t, x, 7, 7, entries(7, 7, 50, nil))
			st, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			if want := []uint64{1, 2, 3, 4, 5, 6, 7}; !reflect.DeepEqual(st.Sequences["p"], want) {
				t.Errorf("entries applied: %v, want each of %v once", st.Sequences["p"], want)
			}
			if st.Rows != 7*50 || len(st.Tables["t"]) != 7*50 {
				t.Errorf("%d rows applied, %d held; want %d", st.Rows, len(st.Tables["t"]), 7*50)
			}
		})
	}
}

// TestLegacyLogRefused: a log of an older testdest has no commit record; cutting it as an uncommitted tail would
// lose it silently.
func TestLegacyLogRefused(t *testing.T) {
	dir := t.TempDir()
	payload := []byte(`{"pipeline":"p","sequence":1,"rows":[]}`)
	hdr := make([]byte, 8)
	putFrameHeader(hdr, payload)
	if err := os.WriteFile(filepath.Join(dir, logName), append(hdr, payload...), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := open(t, dir).LastApplied(context.Background(), "p")
	if fault.ClassOf(err) != fault.Config || !strings.Contains(err.Error(), "older testdest") {
		t.Fatalf("last applied over a legacy log: %v, want a config fault naming the older testdest", err)
	}
}
