package change

import (
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
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
