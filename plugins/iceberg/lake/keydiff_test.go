package lake

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
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

// TestResnapshotSpillSweepsDeadProcesses: a spill directory left by a killed process (its pid is gone) is removed
// by the next end that spills; those of live processes stay.
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
	e := newEnv(t, nil)
	e.d.hooks.resnapBudget, e.d.hooks.spillDir = 1<<10, spill
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
