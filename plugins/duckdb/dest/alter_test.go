package dest

import (
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/plugin-sdk/values"
)

// DuckDB 1.5 refuses to commit a transaction that alters a table after changing its rows ("another transaction
// has altered this table"). A coalesced range whose early entries write a table and whose later entry adds a
// column to it would fail at every retry; it must commit, with every row, and record the range's end. So must
// an entry that truncates and grows a table, or ends a re-snapshot before a schema change.
func TestRangeWithSchemaChangeAfterWrites(t *testing.T) {
	grown := change.Schema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "score", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	}, []string{"id"})
	grownRow := func(op change.Op, id int64, name string, score float64) serve.Item {
		b := change.NewBuilder(memory.DefaultAllocator, grown)
		defer b.Release()
		b.Field(0).(*array.Int64Builder).Append(id)
		b.Field(1).(*array.StringBuilder).Append(name)
		b.Field(2).(*array.Float64Builder).Append(score)
		b.Row(op, "")
		rec := b.NewBatch()
		t.Cleanup(rec.Release)
		return serve.Item{Stream: "public.users", Record: rec}
	}
	at := func(seq uint64, it serve.Item) serve.Item { it.Sequence = seq; return it }
	old := func(seq uint64, rows ...chg) serve.Item { return at(seq, batch(t, userSchema, rows...)) }
	grow := func(seq uint64) serve.Item {
		return at(seq, serve.Item{Stream: "public.users", Schema: &serve.Stream{Name: "public.users", Schema: grown, PrimaryKey: []string{"id"}}})
	}
	// Entry 4 of every case: rows of the grown shape.
	after := []serve.Item{at(4, grownRow(change.OpInsert, 4, "dee", 4.5)), at(4, grownRow(change.OpUpdate, 1, "ann4", 1.5))}
	for _, tc := range []struct {
		name  string
		items []serve.Item // entries 2 and 3, before the rows of entry 4
		want  []string
	}{
		{"insert", []serve.Item{old(2, chg{change.OpInsert, 3, "cy"}), grow(3)},
			[]string{"1|ann4|1.5", "2|bob|NULL", "3|cy|NULL", "4|dee|4.5"}},
		{"update", []serve.Item{old(2, chg{change.OpUpdate, 2, "bob2"}), grow(3)},
			[]string{"1|ann4|1.5", "2|bob2|NULL", "4|dee|4.5"}},
		{"delete", []serve.Item{old(2, chg{change.OpDelete, 2, nil}), grow(3)},
			[]string{"1|ann4|1.5", "4|dee|4.5"}},
		// Rows and a truncate with the schema change in one entry.
		{"truncate", []serve.Item{old(3, chg{change.OpUpdate, 2, "bob2"}), at(3, serve.Item{Stream: "public.users", Truncate: true}), grow(3),
			at(3, grownRow(change.OpInsert, 5, "eve", 5.5))},
			[]string{"1|ann4|1.5", "4|dee|4.5", "5|eve|5.5"}},
		// A re-snapshot ends between rows and a schema change of one entry: its delete precedes the change.
		{"resnapshot end", []serve.Item{at(2, mark("public.users", serve.ResnapshotBegin)), old(2, chg{change.OpRead, 1, "ann"}),
			old(3, chg{change.OpRead, 2, "bob"}), at(3, mark("public.users", serve.ResnapshotEnd)), grow(3)},
			[]string{"1|ann4|1.5", "2|bob|NULL", "4|dee|4.5"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, "")
			h.apply(1, batch(t, userSchema, chg{change.OpInsert, 1, "ann"}, chg{change.OpInsert, 2, "bob"}, chg{change.OpInsert, 9, "gone"}))
			items := append(append([]serve.Item{}, tc.items...), after...)
			res, err := h.d.Apply(ctx(t), serve.ApplyRequest{Settings: h.settings, Pipeline: "p", FirstSequence: 2, Sequence: 4, Items: items})
			if err != nil {
				t.Fatalf("apply 2..4: %v", err)
			}
			if res.Skipped {
				t.Fatal("apply 2..4 skipped")
			}
			want := tc.want
			if tc.name != "truncate" && tc.name != "resnapshot end" { // the re-snapshot did not receive 9
				want = append(want, "9|gone|NULL")
			}
			h.wantRows(`SELECT id, name, score FROM users ORDER BY id`, sorted(want)...)
			h.wantRows(`SELECT pipeline, sequence, streams FROM _skippr_state`, `p|4|{"public.users":4}`)
			// A replay of the range (the engine did not learn of the commit) changes nothing.
			res, err = h.d.Apply(ctx(t), serve.ApplyRequest{Settings: h.settings, Pipeline: "p", FirstSequence: 2, Sequence: 4,
				Items: []serve.Item{old(2, chg{change.OpInsert, 8, "WRONG"})}})
			if err != nil || !res.Skipped {
				t.Fatalf("replay of 2..4: %+v, %v", res, err)
			}
			h.wantRows(`SELECT id, name, score FROM users ORDER BY id`, sorted(want)...)
		})
	}
}

// sorted orders rows "id|…" by their numeric id (one digit here).
func sorted(rows []string) []string {
	out := append([]string(nil), rows...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if strings.Compare(out[j], out[i]) < 0 {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// A range split before its schema change commits its first part with that part's fence. When the rest fails,
// the engine's retry of the whole range skips the committed entries and writes the others once.
func TestRangeSplitAtSchemaChangeFailsAfterFirstPart(t *testing.T) {
	grown := change.Schema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "score", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	}, []string{"id"})
	at := func(seq uint64, it serve.Item) serve.Item { it.Sequence = seq; return it }
	// items.v is BIGINT; entry 3 of the first try sends text that does not cast.
	item := func(seq uint64, dt arrow.DataType, v string) serve.Item {
		sc := change.Schema([]arrow.Field{{Name: "v", Type: dt}}, nil)
		rec, _, err := array.RecordFromJSON(memory.DefaultAllocator, sc, strings.NewReader(`[{"v": `+v+`, "_skippr_op": 1}]`))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rec.Release)
		return at(seq, serve.Item{Stream: "zzz.items", Record: rec})
	}
	h := newHarness(t, "")
	h.apply(1, batch(t, userSchema, chg{change.OpInsert, 1, "ann"}), item(1, arrow.PrimitiveTypes.Int64, "7"))
	rng := func(v serve.Item) []serve.Item {
		return []serve.Item{
			at(2, batch(t, userSchema, chg{change.OpUpdate, 1, "ann2"}, chg{change.OpInsert, 2, "bob"})),
			at(3, serve.Item{Stream: "public.users", Schema: &serve.Stream{Name: "public.users", Schema: grown, PrimaryKey: []string{"id"}}}),
			v,
		}
	}
	_, err := h.d.Apply(ctx(t), serve.ApplyRequest{Settings: h.settings, Pipeline: "p", FirstSequence: 2, Sequence: 3,
		Items: rng(item(3, arrow.BinaryTypes.String, `"not a number"`))})
	if err == nil || !strings.Contains(err.Error(), "stream zzz.items") {
		t.Fatalf("apply 2..3 with a value that does not fit its column: %v", err)
	}
	h.wantRows(`SELECT sequence, streams FROM _skippr_state`, `2|{"public.users":2,"zzz.items":1}`)
	h.wantRows(`SELECT id, name FROM users ORDER BY id`, "1|ann2", "2|bob")
	h.wantRows(`SELECT count(*) FROM duckdb_columns() WHERE table_name = 'users' AND column_name = 'score'`, "0")
	res, err := h.d.Apply(ctx(t), serve.ApplyRequest{Settings: h.settings, Pipeline: "p", FirstSequence: 2, Sequence: 3,
		Items: rng(item(3, arrow.BinaryTypes.String, `"8"`))})
	if err != nil || res.Skipped || res.Rows != 1 {
		t.Fatalf("retry of 2..3: %+v, %v (want entry 3's one row)", res, err)
	}
	h.wantRows(`SELECT id, name, score FROM users ORDER BY id`, "1|ann2|NULL", "2|bob|NULL")
	h.wantRows(`SELECT v FROM items ORDER BY v`, "7", "8")
	h.wantRows(`SELECT sequence, streams FROM _skippr_state`, `3|{"public.users":3,"zzz.items":3}`)
}

// A column added with a value for the existing rows (values.MetaExistingRows: PostgreSQL's ADD COLUMN …
// DEFAULT 42, which no change carries) gives the rows already in the table that value, and so the rows of the
// same entry written in the older shape (inserted before the ADD COLUMN at the source); rows written in the new
// shape keep their own values, NULL included. A value that does not cast leaves NULL rather than failing.
func TestAddedColumnFillsExistingRows(t *testing.T) {
	md := func(v string) arrow.Metadata {
		return arrow.NewMetadata([]string{values.MetaExistingRows}, []string{v})
	}
	grown := change.Schema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "n", Type: arrow.PrimitiveTypes.Int32, Nullable: true, Metadata: md("42")},
		{Name: "bad", Type: arrow.PrimitiveTypes.Int32, Nullable: true, Metadata: md("not a number")},
	}, []string{"id"})
	row := func(id int64, n *int32) serve.Item {
		b := change.NewBuilder(memory.DefaultAllocator, grown)
		defer b.Release()
		b.Field(0).(*array.Int64Builder).Append(id)
		b.Field(1).(*array.StringBuilder).Append("new")
		if n == nil {
			b.Field(2).AppendNull()
		} else {
			b.Field(2).(*array.Int32Builder).Append(*n)
		}
		b.Field(3).AppendNull()
		b.Row(change.OpInsert, "")
		rec := b.NewBatch()
		t.Cleanup(rec.Release)
		return serve.Item{Stream: "public.users", Record: rec}
	}
	seven := int32(7)
	h := newHarness(t, "")
	h.apply(1, batch(t, userSchema, chg{change.OpInsert, 1, "a"}, chg{change.OpInsert, 2, "b"}))
	h.apply(2,
		batch(t, userSchema, chg{change.OpInsert, 3, "c"}, chg{change.OpUpdate, 1, "a2"}),
		serve.Item{Stream: "public.users", Schema: &serve.Stream{Name: "public.users", Schema: grown, PrimaryKey: []string{"id"}}},
		row(4, &seven), row(5, nil))
	h.wantRows(`SELECT id, name, n, bad FROM users ORDER BY id`,
		"1|a2|42|NULL", "2|b|42|NULL", "3|c|42|NULL", "4|new|7|NULL", "5|new|NULL|NULL")
	h.wantRows(`SELECT column_name, column_default IS NULL FROM information_schema.columns WHERE table_name = 'users' AND column_name IN ('n', 'bad') ORDER BY 1`,
		"bad|true", "n|true")
	// The next entries' rows are of the new shape: an insert without n keeps NULL.
	h.apply(3, row(6, nil))
	h.wantRows(`SELECT id, n FROM users WHERE id = 6`, "6|NULL")
}
