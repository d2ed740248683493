package change

import (
	"reflect"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// planBatch is a test batch for Plan: id (the key when keyed) and v, one row per op.
func planBatch(t *testing.T, mem memory.Allocator, keyed bool, ids []int64, ops []Op) arrow.RecordBatch {
	t.Helper()
	var key []string
	if keyed {
		key = []string{"id"}
	}
	sc := Schema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "v", Type: arrow.BinaryTypes.String, Nullable: true}}, key)
	b := NewBuilder(mem, sc)
	defer b.Release()
	for i, id := range ids {
		b.Field(0).(*array.Int64Builder).Append(id)
		b.Field(1).(*array.StringBuilder).Append("x")
		b.Row(ops[i], "")
	}
	return b.NewBatch()
}

func TestPlans(t *testing.T) {
	type add struct {
		stream string
		keyed  bool
		ids    []int64
		ops    []Op
	}
	for _, tc := range []struct {
		name        string
		adds        []add
		wantStreams []string
		wantRows    map[string]int    // per stream: the rows Fold.Last keeps
		wantSchemas map[string]int    // per stream: distinct schemas
		wantKeyed   map[string][]bool // per stream, per batch
		wantErr     string            // the stream whose Add fails
	}{
		{name: "streams in first-seen order, last change per key",
			adds: []add{
				{"b", true, []int64{1, 2}, []Op{OpInsert, OpInsert}},
				{"a", true, []int64{1}, []Op{OpInsert}},
				{"b", true, []int64{1}, []Op{OpDelete}},
			},
			wantStreams: []string{"b", "a"}, wantRows: map[string]int{"a": 1, "b": 2},
			wantSchemas: map[string]int{"a": 1, "b": 1}, wantKeyed: map[string][]bool{"a": {true}, "b": {true, true}}},
		{name: "a schema that differs only in its key metadata counts twice",
			adds: []add{
				{"s", false, []int64{1, 1}, []Op{OpInsert, OpInsert}},
				{"s", true, []int64{1}, []Op{OpInsert}},
			},
			wantStreams: []string{"s"}, wantRows: map[string]int{"s": 3},
			wantSchemas: map[string]int{"s": 2}, wantKeyed: map[string][]bool{"s": {false, true}}},
		{name: "a refused batch is not kept",
			adds: []add{
				{"s", true, []int64{1}, []Op{OpInsert}},
				{"s", false, []int64{1}, []Op{OpUpdate}}, // an update without a key
			},
			wantStreams: []string{"s"}, wantRows: map[string]int{"s": 1},
			wantSchemas: map[string]int{"s": 1}, wantKeyed: map[string][]bool{"s": {true}}, wantErr: "s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
			defer mem.AssertSize(t, 0)
			ps := NewPlans(FoldOptions{})
			if ps.Lookup("a") != nil {
				t.Fatal("lookup of an unseen stream returned a plan")
			}
			failed := ""
			for _, a := range tc.adds {
				rec := planBatch(t, mem, a.keyed, a.ids, a.ops)
				if err := ps.Get(a.stream).Add(rec); err != nil {
					failed = a.stream
				}
				rec.Release() // the plan keeps its own reference
			}
			if failed != tc.wantErr {
				t.Fatalf("add failed for stream %q, want %q", failed, tc.wantErr)
			}
			var streams []string
			for _, p := range ps.List() {
				streams = append(streams, p.Stream)
				if ps.Lookup(p.Stream) != p || ps.Get(p.Stream) != p {
					t.Errorf("stream %s: lookup and get do not return its plan", p.Stream)
				}
				if got := len(p.Fold.Last()); got != tc.wantRows[p.Stream] {
					t.Errorf("stream %s: %d rows folded, want %d", p.Stream, got, tc.wantRows[p.Stream])
				}
				if got := len(p.Schemas); got != tc.wantSchemas[p.Stream] {
					t.Errorf("stream %s: %d schemas, want %d", p.Stream, got, tc.wantSchemas[p.Stream])
				}
				if !reflect.DeepEqual(p.Keyed, tc.wantKeyed[p.Stream]) || len(p.Batches) != len(p.Keyed) {
					t.Errorf("stream %s: keyed %v for %d batches, want %v", p.Stream, p.Keyed, len(p.Batches), tc.wantKeyed[p.Stream])
				}
				// Every row Fold keeps is readable in the batch it names, although the caller released it.
				for _, l := range p.Fold.Last() {
					if id := p.Batches[l.Batch].Column(0).(*array.Int64).Value(l.Row); id < 1 {
						t.Errorf("stream %s: row %+v reads id %d", p.Stream, l, id)
					}
				}
			}
			if !reflect.DeepEqual(streams, tc.wantStreams) {
				t.Errorf("streams %v, want %v", streams, tc.wantStreams)
			}
			ps.Release()
			if len(ps.List()) != 0 || ps.Lookup(tc.wantStreams[0]) != nil {
				t.Error("plans kept after Release")
			}
		})
	}
}
