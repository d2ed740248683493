package dest

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go/table"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

// keyShape is a table whose key the spill tests vary: its key columns, how row i fills them, and the
// partitioning.
type keyShape struct {
	name       string
	key        []arrow.Field
	partitions []string
	put        func(bs []array.Builder, i int) // appends row i's key values
}

var keyShapes = []keyShape{
	{name: "int key", key: []arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}},
		put: func(bs []array.Builder, i int) { bs[0].(*array.Int64Builder).Append(int64(i)) }},
	{name: "int key, partitioned by a bucket of it", key: []arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}},
		partitions: []string{"bucket(8, id)"},
		put:        func(bs []array.Builder, i int) { bs[0].(*array.Int64Builder).Append(int64(i)) }},
	{name: "string, decimal and int32 key, partitioned by a non-key column",
		key: []arrow.Field{
			{Name: "code", Type: arrow.BinaryTypes.String},
			{Name: "amount", Type: &arrow.Decimal128Type{Precision: 18, Scale: 2}},
			{Name: "n", Type: arrow.PrimitiveTypes.Int32},
		},
		partitions: []string{"region"},
		put: func(bs []array.Builder, i int) {
			bs[0].(*array.StringBuilder).Append(fmt.Sprintf("code-%03d-é", i%97)) // several rows share each part
			bs[1].(*array.Decimal128Builder).Append(decimal128.FromI64(int64(i/97) * 125))
			bs[2].(*array.Int32Builder).Append(int32(i % 5))
		}},
}

func (ks keyShape) schema() *arrow.Schema {
	fields := slices.Clone(ks.key)
	fields = append(fields, arrow.Field{Name: "region", Type: arrow.BinaryTypes.String, Nullable: true},
		arrow.Field{Name: "v", Type: arrow.PrimitiveTypes.Int64, Nullable: true})
	names := make([]string, len(ks.key))
	for i, f := range ks.key {
		names[i] = f.Name
	}
	return change.Schema(fields, names)
}

func (ks keyShape) keyNames() []string {
	names := make([]string, len(ks.key))
	for i, f := range ks.key {
		names[i] = f.Name
	}
	return names
}

// rows builds a batch of rows i in ids, with value v.
func (ks keyShape) rows(t *testing.T, op change.Op, v int, ids ...int) serve.Item {
	t.Helper()
	sc := ks.schema()
	b := change.NewBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	for _, i := range ids {
		bs := make([]array.Builder, len(ks.key))
		for j := range bs {
			bs[j] = b.Field(j)
		}
		ks.put(bs, i)
		n := len(ks.key)
		if op == opD {
			b.Field(n).AppendNull()
			b.Field(n + 1).AppendNull()
		} else {
			b.Field(n).(*array.StringBuilder).Append([]string{"eu", "us", "ap"}[i%3])
			b.Field(n + 1).(*array.Int64Builder).Append(int64(v))
		}
		b.Row(op, "")
	}
	rec := b.NewBatch()
	t.Cleanup(rec.Release)
	return serve.Item{Stream: "t", Record: rec}
}

func span(from, to int, skip func(int) bool) []int {
	var out []int
	for i := from; i < to; i++ {
		if !skip(i) {
			out = append(out, i)
		}
	}
	return out
}

// spillDirEmpty fails the test if a re-snapshot end left anything in its spill directory.
func spillDirEmpty(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) > 0 {
		t.Fatalf("spill directory holds %d entries after the end: %s…", len(ents), ents[0].Name())
	}
}

// TestResnapshotEndSpillsKeys: with a memory budget far below the keys of a re-snapshot's end, the received and
// live keys are partitioned on disk and diffed partition by partition, and the rows removed are the same as when
// the keys are diffed in memory, for integer and composite keys (string, decimal, int32) and partitioned
// tables. An end whose commit fails leaves the table and the spill directory as they were; its replay removes
// the same rows. The spill directory is empty after every end.
func TestResnapshotEndSpillsKeys(t *testing.T) {
	const n = 2400
	stray := func(i int) bool { return i%41 == 3 } // rows the source no longer has
	for _, ks := range keyShapes {
		t.Run(ks.name, func(t *testing.T) {
			run := func(t *testing.T, budget int64) (ids []string, spills int64) {
				var extra map[string]any
				if ks.partitions != nil {
					extra = map[string]any{"partitions": map[string]any{"t": ks.partitions}}
				}
				e := newEnv(t, extra)
				spill := t.TempDir()
				e.d.hooks.resnapBudget, e.d.hooks.spillDir = budget, spill
				none := func(int) bool { return false }
				e.apply(1, ks.rows(t, opI, 1, span(0, n/2, none)...), ks.rows(t, opI, 1, span(n/2, n, none)...))
				// The copy: a begin, reads over several applies, a delete and an update while it runs, and rows of
				// the end's own apply before the end mark (received in memory beside the spilled ones).
				e.apply(2, mark("t", serve.ResnapshotBegin), ks.rows(t, opR, 2, span(0, 600, stray)...))
				e.apply(3, ks.rows(t, opR, 2, span(600, 1800, stray)...), ks.rows(t, opD, 0, 7), ks.rows(t, opU, 3, 8, 1900))
				end := []serve.Item{ks.rows(t, opR, 2, span(1800, n, stray)...), mark("t", serve.ResnapshotEnd), ks.rows(t, opI, 4, n, n+1)}
				before := slices.Sorted(maps.Keys(e.rows("t", ks.keyNames()...)))

				e.d.hooks.beforeCommit = func(string, int) error { return errors.New("injected: crash before the end's commit") }
				if _, err := e.d.Apply(ctxT(t), serve.ApplyRequest{Settings: e.raw, Pipeline: e.pipeline, Sequence: 4, Items: end}); err == nil {
					t.Fatal("the end with a failing commit succeeded")
				}
				e.d.hooks.beforeCommit = nil
				spillDirEmpty(t, spill)
				if got := slices.Sorted(maps.Keys(e.rows("t", ks.keyNames()...))); !slices.Equal(got, before) {
					t.Fatalf("a failed end changed the table: %d keys, had %d", len(got), len(before))
				}
				e.apply(4, end...)
				spillDirEmpty(t, spill)
				if p := e.resnapProp("t"); p != "" {
					t.Fatalf("the end left the property %s", p)
				}
				return slices.Sorted(maps.Keys(e.rows("t", ks.keyNames()...))), e.d.resnapSpills.Load()
			}
			var inMemory, spilled []string
			t.Run("in memory", func(t *testing.T) {
				var spills int64
				if inMemory, spills = run(t, 0); spills != 0 {
					t.Fatalf("an unlimited budget spilled %d times", spills)
				}
			})
			t.Run("spilled", func(t *testing.T) {
				var spills int64
				if spilled, spills = run(t, 4<<10); spills != 2 { // the failed end and its replay
					t.Fatalf("a 4 KiB budget over %d keys spilled %d times, want 2", n, spills)
				}
			})
			if t.Failed() {
				return
			}
			// What a correct end leaves, independently of either diff: every key but the strays and the deleted.
			e := newEnv(t, nil)
			want := ks.rows(t, opI, 0, append(span(0, n, func(i int) bool { return stray(i) || i == 7 }), n, n+1)...)
			e.apply(1, want)
			wantIDs := slices.Sorted(maps.Keys(e.rows("t", ks.keyNames()...)))
			if !slices.Equal(inMemory, wantIDs) {
				t.Fatalf("in memory: %d keys remain, want %d", len(inMemory), len(wantIDs))
			}
			if !slices.Equal(spilled, inMemory) {
				t.Fatalf("spilled: %d keys remain, in memory %d", len(spilled), len(inMemory))
			}
		})
	}
}

// TestResnapshotSpillSweepsDeadProcesses: the end spills under the spill_dir setting; a spill directory left
// there by a killed process (its pid is gone) is removed by the next end that spills; those of live processes
// stay.
func TestResnapshotSpillSweepsDeadProcesses(t *testing.T) {
	spill := t.TempDir()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := filepath.Join(spill, spillPrefix+strconv.Itoa(cmd.Process.Pid)+"-1")
	live := filepath.Join(spill, spillPrefix+"1-1") // pid 1 is always alive
	for _, d := range []string{dead, live} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "received-0-0"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ks := keyShapes[0]
	e := newEnv(t, map[string]any{"spill_dir": spill}) // the setting, not the test hook
	e.d.hooks.resnapBudget = 1 << 10
	e.apply(1, ks.rows(t, opI, 1, span(0, 500, func(int) bool { return false })...))
	e.apply(2, mark("t", serve.ResnapshotBegin))
	e.apply(3, ks.rows(t, opR, 1, span(0, 500, func(i int) bool { return i%2 == 0 })...))
	e.apply(4, mark("t", serve.ResnapshotEnd))
	if e.d.resnapSpills.Load() != 1 {
		t.Fatal("the end did not spill")
	}
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Fatalf("the dead process's spill directory is still there: %v", err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Fatalf("a live process's spill directory was removed: %v", err)
	}
	if got := len(e.ids("t")); got != 250 {
		t.Fatalf("table holds %d rows, want 250", got)
	}
}

// BenchmarkResnapshotEnd measures the end mark's apply of a re-snapshot of a 1M-row table (id, a string) in a
// local warehouse that removes 1% (10,000 rows the copy did not send): the keys of the files added since the
// begin read back, the live keys scanned, the equality deletes written. in-memory diffs the keys in maps (the
// default memory_limit, 256 MiB, leaves them room); spilled gives the diff 8 MiB, the share of memory_limit
// 32MiB, so both sides are partitioned on disk; spilled/GOMEMLIMIT=32MiB also sets the Go runtime's memory limit
// to 32 MiB during the end, as the plugin's main does from memory_limit, so the heap is collected before it
// doubles. It reports the peak Go heap in use during the end (sampled
// every 5 ms) above the heap in use before it, and the same for the scan of the live keys alone (iceberg-go
// applying the copy's equality deletes), which the end makes whatever the diff does; it checks the end wrote
// the 1% as equality deletes.
func BenchmarkResnapshotEnd(b *testing.B) {
	rows := benchSize(b, "SKIPPR_BENCH_RESNAP_ROWS", 1_000_000)
	stray := rows / 100
	sc := change.Schema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
	}, []string{"id"})
	mk := func(op change.Op, from, n int) []serve.Item {
		var out []serve.Item
		for lo := from; lo < from+n; lo += 100_000 {
			bld := change.NewBuilder(memory.DefaultAllocator, sc)
			for i := lo; i < min(lo+100_000, from+n); i++ {
				bld.Field(0).(*array.Int64Builder).Append(int64(i))
				bld.Field(1).(*array.StringBuilder).Append("name-" + strconv.Itoa(i))
				bld.Row(op, "")
			}
			out = append(out, serve.Item{Stream: "t", Record: bld.NewBatch()})
			bld.Release()
		}
		return out
	}
	reads, strays := mk(change.OpRead, 0, rows), mk(change.OpInsert, rows, stray)
	defer func() {
		for _, it := range append(reads, strays...) {
			it.Record.Release()
		}
	}()
	for _, v := range []struct {
		name    string
		budget  int64
		goLimit int64 // the Go runtime's soft memory limit during the end, as the plugin sets it from memory_limit
	}{{"in-memory", 0, 0}, {"spilled", 8 << 20, 0}, {"spilled/GOMEMLIMIT=32MiB", 8 << 20, 32 << 20}} {
		b.Run(v.name, func(b *testing.B) {
			raw, _ := json.Marshal(map[string]any{"catalog": map[string]any{"warehouse": filepath.Join(b.TempDir(), "wh")}})
			d := &Destination{Log: slog.New(slog.DiscardHandler)}
			d.hooks.resnapBudget, d.hooks.spillDir = v.budget, b.TempDir()
			defer d.Close()
			var seq uint64
			apply := func(items ...serve.Item) {
				seq++
				if _, err := d.Apply(b.Context(), serve.ApplyRequest{Settings: raw, Pipeline: "bench", Sequence: seq, Items: items}); err != nil {
					b.Fatal(err)
				}
			}
			s, err := ParseSettings(raw)
			if err != nil {
				b.Fatal(err)
			}
			var peak, scanPeak uint64
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				apply(strays...)
				apply(serve.Item{Stream: "t", Resnapshot: serve.ResnapshotBegin})
				apply(reads...)
				// The scan of the live keys that the end makes, alone: what iceberg-go takes to read the key
				// column with the copy's equality deletes applied, whatever the diff does.
				oc, err := d.catalog(b.Context(), raw, s)
				if err != nil {
					b.Fatal(err)
				}
				tbl, err := oc.cat.LoadTable(b.Context(), []string{"skippr", "t"})
				if err != nil {
					b.Fatal(err)
				}
				scanPeak = max(scanPeak, peakHeap(func() {
					_, recs, err := tbl.Scan(table.WithSelectedFields("id")).ToArrowRecords(b.Context())
					if err != nil {
						b.Fatal(err)
					}
					for rec, err := range recs {
						if err != nil {
							b.Fatal(err)
						}
						rec.Release()
					}
				}))
				b.StartTimer()
				if v.goLimit > 0 {
					defer debug.SetMemoryLimit(debug.SetMemoryLimit(v.goLimit))
				}
				peak = max(peak, peakHeap(func() { apply(serve.Item{Stream: "t", Resnapshot: serve.ResnapshotEnd}) }))
				if v.goLimit > 0 {
					debug.SetMemoryLimit(math.MaxInt64)
				}
				b.StopTimer()
				tbl, err = oc.cat.LoadTable(b.Context(), []string{"skippr", "t"})
				if err != nil {
					b.Fatal(err)
				}
				if got := tbl.CurrentSnapshot().Summary.Properties["added-equality-deletes"]; got != strconv.Itoa(stray) {
					b.Fatalf("the end wrote %s equality deletes, want %d", got, stray)
				}
				b.StartTimer()
			}
			if v.budget > 0 && d.resnapSpills.Load() != int64(b.N) {
				b.Fatalf("%d of %d ends spilled", d.resnapSpills.Load(), b.N)
			}
			if v.budget == 0 && d.resnapSpills.Load() != 0 {
				b.Fatal("the in-memory variant spilled")
			}
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
			b.ReportMetric(float64(scanPeak)/(1<<20), "scan-peak-heap-MiB")
			b.ReportMetric(float64(rows*b.N)/b.Elapsed().Seconds(), "live-keys/s")
		})
	}
}

// peakHeap runs fn and returns the most heap in use while it ran (sampled every 5 ms) above the heap in use
// before it, after a GC.
func peakHeap(fn func()) uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	stop, done := make(chan struct{}), make(chan uint64)
	go func() {
		var top uint64
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			top = max(top, ms.HeapInuse)
			select {
			case <-stop:
				done <- top
				return
			case <-t.C:
			}
		}
	}()
	fn()
	close(stop)
	if top := <-done; top > base {
		return top - base
	}
	return 0
}

// TestResnapshotSpillDirUnusable: an end that must spill into a spill_dir it cannot write fails as a
// configuration fault naming the setting, commits nothing (the re-snapshot stays open), and its replay with a
// usable spill_dir removes the rows not received.
func TestResnapshotSpillDirUnusable(t *testing.T) {
	dir := t.TempDir()
	settings := func(spill string) json.RawMessage {
		raw, err := json.Marshal(map[string]any{"catalog": map[string]any{"warehouse": filepath.Join(dir, "wh")}, "namespace": "lake", "spill_dir": spill})
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	e := newEnvAt(t, dir, map[string]any{"spill_dir": filepath.Join(dir, "missing")})
	e.d.hooks.resnapBudget = 1 << 10
	ks := keyShapes[0]
	e.apply(1, ks.rows(t, opI, 1, span(0, 500, func(int) bool { return false })...))
	e.apply(2, mark("t", serve.ResnapshotBegin))
	e.apply(3, ks.rows(t, opR, 1, span(0, 500, func(i int) bool { return i%5 == 0 })...))
	begin, snap := e.resnapProp("t"), snapshotID(e, "t")
	_, err := e.d.Apply(ctxT(t), serve.ApplyRequest{Settings: e.raw, Pipeline: e.pipeline, Sequence: 4, Items: []serve.Item{mark("t", serve.ResnapshotEnd)}})
	if !errors.Is(err, fault.ErrConfig) || !strings.Contains(fault.FixOf(err), "spill_dir") {
		t.Fatalf("end with a missing spill_dir: %v (fix %q)", err, fault.FixOf(err))
	}
	if snapshotID(e, "t") != snap || e.resnapProp("t") != begin {
		t.Fatal("the failed end committed")
	}
	e.raw = settings(t.TempDir())
	e.apply(4, mark("t", serve.ResnapshotEnd))
	if got := len(e.ids("t")); got != 400 {
		t.Fatalf("table holds %d rows after the replayed end, want 400", got)
	}
}

// TestResnapshotEndKilledWhileSpilling: a process SIGKILLed in the middle of an end's spilled diff (both sides
// on disk) commits nothing and leaves its spill directory; the end applied again by another process removes that
// directory, removes exactly the rows not received, and leaves the spill directory empty.
func TestResnapshotEndKilledWhileSpilling(t *testing.T) {
	const envDir = "SKIPPR_TEST_RESNAP_KILL_DIR"
	ks := keyShapes[0]
	end := func(e *env) serve.ApplyResult { return e.apply(4, mark("t", serve.ResnapshotEnd)) }
	if dir := os.Getenv(envDir); dir != "" {
		// The child: the end, stopped by the parent's SIGKILL while its spill files are open.
		e := newEnvAt(t, dir, map[string]any{"spill_dir": filepath.Join(dir, "spill")})
		e.d.hooks.resnapBudget = 1 << 10
		e.d.hooks.resnapDiffing = func() {
			fmt.Println("DIFFING")
			time.Sleep(time.Hour)
		}
		end(e)
		t.Fatal("the end finished before the kill")
	}
	dir := t.TempDir()
	spill := filepath.Join(dir, "spill")
	if err := os.Mkdir(spill, 0o755); err != nil {
		t.Fatal(err)
	}
	e := newEnvAt(t, dir, map[string]any{"spill_dir": spill})
	e.d.hooks.resnapBudget = 1 << 10
	e.apply(1, ks.rows(t, opI, 1, span(0, 3000, func(int) bool { return false })...))
	e.apply(2, mark("t", serve.ResnapshotBegin))
	e.apply(3, ks.rows(t, opR, 1, span(0, 3000, func(i int) bool { return i%10 == 0 })...))
	begin, snap := e.resnapProp("t"), snapshotID(e, "t")

	cmd := exec.CommandContext(ctxT(t), os.Args[0], "-test.run=^TestResnapshotEndKilledWhileSpilling$", "-test.v")
	cmd.Env = append(os.Environ(), envDir+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	for sc.Scan() && !strings.Contains(sc.Text(), "DIFFING") {
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err == nil {
		t.Fatal("the child ended without the kill (it never reached the diff)")
	}
	left, err := os.ReadDir(spill)
	if err != nil || len(left) != 1 || !strings.HasPrefix(left[0].Name(), spillPrefix+strconv.Itoa(cmd.Process.Pid)+"-") {
		t.Fatalf("the killed end left %v in the spill directory (%v), want its own directory", left, err)
	}
	if snapshotID(e, "t") != snap || e.resnapProp("t") != begin {
		t.Fatal("the killed end committed")
	}
	end(e)
	spillDirEmpty(t, spill)
	if got := len(e.ids("t")); got != 2700 {
		t.Fatalf("table holds %d rows after the end, want 2700", got)
	}
	for k := range e.expected["t"] {
		if n, _ := strconv.Atoi(k); n%10 == 0 {
			delete(e.expected["t"], k)
		}
	}
	e.check("t", "t", "id")
}
