package dest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/testkit/bigquerytest"
)

// kv is one change of a stream (id INT64, v STRING), keyed by id or keyless.
type kv struct {
	op change.Op
	id int64
	v  string
}

func kvBatch(mem memory.Allocator, keyed bool, rows ...kv) arrow.RecordBatch {
	var key []string
	if keyed {
		key = []string{"id"}
	}
	b := change.NewBuilder(mem, change.Schema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "v", Type: arrow.BinaryTypes.String, Nullable: true},
	}, key))
	defer b.Release()
	for _, r := range rows {
		b.Field(0).(*array.Int64Builder).Append(r.id)
		if r.op == change.OpDelete {
			b.Field(1).AppendNull()
		} else {
			b.Field(1).(*array.StringBuilder).Append(r.v)
		}
		b.Row(r.op, "")
	}
	return b.NewBatch()
}

// dumpKV reads table as "id|v" lines, ordered (a keyless table may hold duplicates).
func dumpKV(t *testing.T, s *bigquerytest.Server, table string) []string {
	t.Helper()
	rows, err := s.Pool().Query(context.Background(), fmt.Sprintf(`SELECT concat_ws('|', id, v) FROM analytics.%q ORDER BY id, v`, table))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var l string
		if err := rows.Scan(&l); err != nil {
			t.Fatal(err)
		}
		out = append(out, l)
	}
	return out
}

// TestApplyKeylessAndTruncates: keyless streams append every row (across the entries of a range too), a
// truncate in a later entry of a range voids the rows earlier entries of the range staged, a truncate inside
// an entry keeps only the rows after it, and a key changed in every entry of a range ends as its last change.
func TestApplyKeylessAndTruncates(t *testing.T) {
	type apply struct {
		first, last uint64
		entries     [][]any // per entry from first: kv rows of one batch, or "truncate"
	}
	ins := func(id int64, v string) kv { return kv{op: change.OpInsert, id: id, v: v} }
	upd := func(id int64, v string) kv { return kv{op: change.OpUpdate, id: id, v: v} }
	del := func(id int64) kv { return kv{op: change.OpDelete, id: id} }
	for _, tc := range []struct {
		name    string
		keyed   bool
		applies []apply
		want    []string
	}{
		{name: "keyless appends every row", applies: []apply{
			{1, 1, [][]any{{ins(1, "a"), ins(1, "b")}}},
			{2, 3, [][]any{{ins(2, "c")}, {ins(1, "a")}}},
			{2, 3, [][]any{{ins(9, "replayed")}, {ins(9, "replayed")}}}, // a replay: skipped
		}, want: []string{"1|a", "1|a", "1|b", "2|c"}},
		{name: "keyless truncate in a later entry voids the range's earlier rows", applies: []apply{
			{1, 1, [][]any{{ins(1, "a")}}},
			{2, 4, [][]any{{ins(2, "b")}, {"truncate"}, {ins(3, "c"), ins(3, "c")}}},
		}, want: []string{"3|c", "3|c"}},
		{name: "keyed truncate inside an entry keeps the rows after it", keyed: true, applies: []apply{
			{1, 1, [][]any{{ins(1, "a"), ins(2, "b")}}},
			{2, 2, [][]any{{upd(1, "a2")}, {"truncate"}, {ins(3, "c")}}},
		}, want: []string{"3|c"}},
		{name: "keyed truncate in a later entry, rows before and after", keyed: true, applies: []apply{
			{1, 1, [][]any{{ins(1, "a")}}},
			{2, 4, [][]any{{ins(2, "b")}, {"truncate", ins(4, "d")}, {ins(5, "e")}}},
		}, want: []string{"4|d", "5|e"}},
		{name: "keyed: a key in every entry ends as its last change", keyed: true, applies: []apply{
			{1, 1, [][]any{{ins(1, "a"), ins(2, "b")}}},
			{2, 5, [][]any{{upd(1, "b"), ins(5, "x")}, {del(1), upd(2, "b2")}, {ins(1, "c"), del(5)}, {upd(1, "d")}}},
		}, want: []string{"1|d", "2|b2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := bigquerytest.Start(t, project)
			raw := settings(s)
			d := serve.NewSessions(&Destination{})
			t.Cleanup(func() { d.Close() })
			for _, ap := range tc.applies {
				var items []serve.Item
				for i, e := range ap.entries {
					seq := ap.first + uint64(i)
					var rows []kv
					flush := func() {
						if len(rows) > 0 {
							items = append(items, serve.Item{Stream: "public.events", Record: kvBatch(memory.DefaultAllocator, tc.keyed, rows...), Sequence: seq})
							rows = nil
						}
					}
					for _, x := range e {
						switch x := x.(type) {
						case string:
							flush()
							items = append(items, serve.Item{Stream: "public.events", Truncate: true, Sequence: seq})
						case kv:
							rows = append(rows, x)
						}
					}
					flush()
				}
				req := serve.ApplyRequest{Settings: raw, Pipeline: "p", FirstSequence: ap.first, Sequence: ap.last}
				if _, err := d.ApplyStream(context.Background(), req, seqOf(items)); err != nil {
					t.Fatalf("apply %d–%d: %v", ap.first, ap.last, err)
				}
			}
			if got := dumpKV(t, s, "events"); strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("table holds\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func seqOf(items []serve.Item) func(yield func(serve.Item, error) bool) {
	return func(yield func(serve.Item, error) bool) {
		for _, it := range items {
			if !yield(it, nil) {
				return
			}
		}
	}
}

// TestApplyStreamHoldsOneEntry applies a range of many entries through ApplyStream, releasing each record
// once the next item is asked for (as the SDK does), and measures the bytes of records alive whenever a new
// one is made: the destination may keep the entry it is reading, not the range. The table must then hold
// each key's last change.
func TestApplyStreamHoldsOneEntry(t *testing.T) {
	s := bigquerytest.Start(t, project)
	raw := settings(s)
	d := serve.NewSessions(&Destination{})
	t.Cleanup(func() { d.Close() })
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	const entries, perEntry = 30, 300
	var peak, one int
	items := func(yield func(serve.Item, error) bool) {
		for e := 1; e <= entries; e++ {
			rows := make([]kv, perEntry)
			for i := range rows {
				rows[i] = kv{op: change.OpUpdate, id: int64(i), v: fmt.Sprintf("%s-%d", strings.Repeat("x", 64), e)}
				if e == 1 {
					rows[i].op = change.OpInsert
				}
			}
			rec := kvBatch(mem, true, rows...)
			if e == 1 {
				one = mem.CurrentAlloc()
			}
			peak = max(peak, mem.CurrentAlloc())
			ok := yield(serve.Item{Stream: "public.events", Record: rec, Sequence: uint64(e)}, nil)
			rec.Release()
			if !ok {
				return
			}
		}
	}
	req := serve.ApplyRequest{Settings: raw, Pipeline: "p", FirstSequence: 1, Sequence: entries}
	if _, err := d.ApplyStream(context.Background(), req, items); err != nil {
		t.Fatal(err)
	}
	mem.AssertSize(t, 0)
	// The entry being read and the one before it (staged when the next item arrives) may be alive.
	if peak > 2*one+one/2 {
		t.Fatalf("records alive peaked at %d bytes, %.1f entries of %d bytes: the range is held, not one entry", peak, float64(peak)/float64(one), one)
	}
	got := dumpKV(t, s, "events")
	if len(got) != perEntry {
		t.Fatalf("%d rows, want %d", len(got), perEntry)
	}
	for _, l := range got {
		if !strings.HasSuffix(l, fmt.Sprintf("-%d", entries)) {
			t.Fatalf("row %s is not the last change of its key", l)
		}
	}
	t.Logf("peak %d bytes of records alive; one entry %d bytes", peak, one)
}
