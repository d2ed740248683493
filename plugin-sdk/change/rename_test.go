package change

import (
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

func TestRenames(t *testing.T) {
	f := func(name string) arrow.Field { return arrow.Field{Name: name, Type: arrow.PrimitiveTypes.Int64} }
	mark := func(name, from string) arrow.Field { return MarkRenamed(f(name), from) }
	for _, tc := range []struct {
		name   string
		fields []arrow.Field
		table  []string // the destination's columns
		want   []Rename
	}{
		{"renamed", []arrow.Field{f("id"), mark("b", "a")}, []string{"id", "a"}, []Rename{{"a", "b"}}},
		{"replayed: already renamed", []arrow.Field{f("id"), mark("b", "a")}, []string{"id", "b"}, nil},
		{"new table", []arrow.Field{f("id"), mark("b", "a")}, nil, nil},
		{"no marker", []arrow.Field{f("id"), f("b")}, []string{"id", "a"}, nil},
		{"renamed, then the old name added again", []arrow.Field{f("id"), mark("b", "a"), f("a")}, []string{"id", "a"}, []Rename{{"a", "b"}}},
		{"two fields claim one name", []arrow.Field{mark("b", "a"), mark("c", "a")}, []string{"a"}, nil},
		{"a chain keeps the first name", []arrow.Field{mark("c", "a")}, []string{"a"}, []Rename{{"a", "c"}}},
		{"case folded by the destination", []arrow.Field{mark("B", "a")}, []string{"A"}, []Rename{{"a", "B"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			has := func(n string) bool {
				return slices.ContainsFunc(tc.table, func(c string) bool { return strings.EqualFold(c, n) })
			}
			if got := Renames(tc.fields, has); !slices.Equal(got, tc.want) {
				t.Fatalf("Renames = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestMarkRenamed(t *testing.T) {
	md := arrow.NewMetadata([]string{"k"}, []string{"v"})
	f := MarkRenamed(arrow.Field{Name: "b", Type: arrow.PrimitiveTypes.Int64, Metadata: md}, "a")
	if RenamedFrom(f) != "a" {
		t.Fatalf("RenamedFrom = %q", RenamedFrom(f))
	}
	if v, _ := f.Metadata.GetValue("k"); v != "v" {
		t.Fatalf("other metadata lost: %v", f.Metadata)
	}
	if g := MarkRenamed(f, "x"); RenamedFrom(g) != "x" || g.Metadata.Len() != 2 {
		t.Fatalf("re-marked: %v", g.Metadata)
	}
	if g := MarkRenamed(arrow.Field{Name: "b"}, "b"); RenamedFrom(g) != "" {
		t.Fatal("a field renamed to its own name is marked")
	}
}

// TestPlanFollowsRenames: a plan whose later schema renames a column relabels the schemas and batches before
// it (the destination renames the column first and then writes the older rows into it), key included.
func TestPlanFollowsRenames(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	old := Schema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "v", Type: arrow.BinaryTypes.String, Nullable: true}}, []string{"id"})
	renamed := Schema([]arrow.Field{MarkRenamed(arrow.Field{Name: "id2", Type: arrow.PrimitiveTypes.Int64}, "id"), MarkRenamed(arrow.Field{Name: "w", Type: arrow.BinaryTypes.String, Nullable: true}, "v")}, []string{"id2"})
	batch := func(s *arrow.Schema, id int64) arrow.RecordBatch {
		b := NewBuilder(mem, s)
		defer b.Release()
		b.Field(0).(*array.Int64Builder).Append(id)
		b.Field(1).(*array.StringBuilder).Append("x")
		b.Row(OpInsert, "")
		return b.NewBatch()
	}
	p := NewPlan("s", FoldOptions{})
	defer p.Release()
	for _, rec := range []arrow.RecordBatch{batch(old, 1), batch(old, 2)} {
		if err := p.Add(rec); err != nil {
			t.Fatal(err)
		}
		rec.Release()
	}
	p.AddSchema(renamed)
	rec := batch(renamed, 3)
	if err := p.Add(rec); err != nil {
		t.Fatal(err)
	}
	rec.Release()
	if len(p.Schemas) != 2 {
		t.Fatalf("%d schemas", len(p.Schemas))
	}
	for i, rec := range p.Batches[:2] {
		s := rec.Schema()
		if s != p.Schemas[0] {
			t.Errorf("batch %d: schema not the plan's relabeled one", i)
		}
		if s.Field(0).Name != "id2" || s.Field(1).Name != "w" || RenamedFrom(s.Field(1)) != "v" {
			t.Errorf("batch %d relabeled to %s", i, s)
		}
		if k := PrimaryKey(s); len(k) != 1 || k[0] != "id2" {
			t.Errorf("batch %d key %v", i, k)
		}
	}
	if RelabelRenamed(renamed, renamed) != renamed {
		t.Error("a schema that already has the new names is relabeled")
	}
}

func TestMarkRenamedTable(t *testing.T) {
	s := Schema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}}, []string{"id"})
	if got := RenamedFromTable(s); got != "" {
		t.Fatalf("unmarked schema: %q", got)
	}
	if MarkRenamedTable(s, "") != s {
		t.Fatalf("an empty former name must leave the schema as it is")
	}
	m := MarkRenamedTable(MarkRenamedTable(s, "shop.x"), "shop.a")
	if got := RenamedFromTable(m); got != "shop.a" {
		t.Fatalf("marked: %q, want shop.a", got)
	}
	if strings.Count(strings.Join(m.Metadata().Keys(), ","), RenamedFromTableMeta) != 1 {
		t.Fatalf("the marker is recorded more than once: %v", m.Metadata())
	}
	if !slices.Equal(PrimaryKey(m), []string{"id"}) {
		t.Fatalf("the key metadata is lost: %v", m.Metadata())
	}
	if RenamedFromTable(nil) != "" {
		t.Fatalf("nil schema")
	}
}
