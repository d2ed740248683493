package source

import (
	"strings"
	"testing"
)

// TestRenamedColumns: a rename is read from a Relation message's positions, checked against attnums where the
// catalog gave them.
func TestRenamedColumns(t *testing.T) {
	const int4, text = 23, 25
	col := func(name string, typ uint32, attnum int16) column {
		return column{Name: name, TypeOID: typ, Attnum: attnum}
	}
	for _, tc := range []struct {
		name      string
		prev, cur []column
		want      string // cur's names, each renamed one as new<-old
	}{
		{"renamed", []column{col("id", int4, 1), col("a", text, 2)}, []column{col("id", int4, 1), col("b", text, 2)}, "id,b<-a"},
		{"renamed, attnum unknown before", []column{col("id", int4, 1), col("a", text, 0)}, []column{col("id", int4, 1), col("b", text, 2)}, "id,b<-a"},
		{"key renamed", []column{col("id", int4, 1), col("a", text, 2)}, []column{col("uid", int4, 1), col("a", text, 2)}, "uid<-id,a"},
		{"dropped last, added one of the same type", []column{col("id", int4, 1), col("a", text, 2)}, []column{col("id", int4, 1), col("b", text, 3)}, "id,b"},
		{"dropped last, added one of another type", []column{col("id", int4, 1), col("a", text, 0)}, []column{col("id", int4, 1), col("b", int4, 3)}, "id,b"},
		{"a column added", []column{col("id", int4, 1)}, []column{col("id", int4, 1), col("b", text, 2)}, "id,b"},
		{"names swapped", []column{col("a", text, 1), col("b", text, 2)}, []column{col("b", text, 1), col("a", text, 2)}, "b,a"},
		{"unchanged", []column{col("id", int4, 1), col("a", text, 2)}, []column{col("id", int4, 1), col("a", text, 2)}, "id,a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			renamedColumns(tc.prev, tc.cur)
			var got []string
			for _, c := range tc.cur {
				n := c.Name
				if c.RenamedFrom != "" {
					n += "<-" + c.RenamedFrom
				}
				got = append(got, n)
			}
			if g := strings.Join(got, ","); g != tc.want {
				t.Errorf("got %s, want %s", g, tc.want)
			}
		})
	}
}
