package source

import (
	"fmt"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/decimal128"
)

// TestSmallDecimal: the fast path reads what decimal128.FromString reads, and leaves to it what it cannot
// read exactly (too many digits, another scale, not a number).
func TestSmallDecimal(t *testing.T) {
	for _, tc := range []struct {
		in    string
		scale int32
		ok    bool
	}{
		{"123.45", 2, true},
		{"-123.45", 2, true},
		{"0.00", 2, true},
		{"-0.01", 2, true},
		{"42", 0, true},
		{"999999999999999999", 0, true},
		{"-99999999999999.9999", 4, true},
		{"9999999999999999999", 0, false}, // 19 digits: may not fit an int64
		{"1.5", 2, false},                 // not the column's scale
		{"12", 2, false},
		{"1e5", 0, false},
		{"", 0, false},
		{"-", 0, false},
		{"1.2.3", 1, false},
	} {
		n, ok := smallDecimal([]byte(tc.in), tc.scale)
		if ok != tc.ok {
			t.Errorf("%q scale %d: ok %v, want %v", tc.in, tc.scale, ok, tc.ok)
			continue
		}
		if !ok {
			continue
		}
		want, err := decimal128.FromString(tc.in, 38, tc.scale)
		if err != nil {
			t.Fatal(err)
		}
		if got := decimal128.FromI64(n); got != want {
			t.Errorf("%q scale %d: %v, FromString %v", tc.in, tc.scale, got, want)
		}
	}
}

// TestReconcile: streaming starts at the earliest of the readers' snapshots, and the latest, when later
// than that start and than an earlier overlap, becomes the overlap (inserts as upserts up to it).
func TestReconcile(t *testing.T) {
	type want struct {
		file    string
		pos     uint64
		overlap string // "file:pos", "" for none
		set     bool
	}
	for _, tc := range []struct {
		name  string
		start Position
		at    []coord
		fresh bool
		want
	}{
		{"fresh, one point", Position{}, []coord{{"b.000002", 100}, {"b.000002", 100}}, true, want{"b.000002", 100, "", false}},
		{"fresh, apart", Position{}, []coord{{"b.000002", 300}, {"b.000002", 100}, {"b.000002", 200}}, true, want{"b.000002", 100, "b.000002:300", true}},
		{"fresh, apart across files", Position{}, []coord{{"b.000003", 4}, {"b.000002", 900}}, true, want{"b.000002", 900, "b.000003:4", true}},
		{"resumed, nothing written since", Position{File: "b.000002", Pos: 100}, []coord{{"b.000002", 100}}, false, want{"b.000002", 100, "", false}},
		{"resumed, written since", Position{File: "b.000002", Pos: 100}, []coord{{"b.000002", 150}, {"b.000002", 180}}, false, want{"b.000002", 100, "b.000002:180", true}},
		{"resumed, earlier overlap kept", Position{File: "b.000002", Pos: 100, OverlapFile: "b.000002", OverlapPos: 500}, []coord{{"b.000002", 180}}, false, want{"b.000002", 100, "b.000002:500", false}},
	} {
		p := tc.start
		set := reconcile(&p, tc.at, "0-1-5", tc.fresh)
		overlap := ""
		if p.OverlapFile != "" {
			overlap = fmt.Sprintf("%s:%d", p.OverlapFile, p.OverlapPos)
		}
		if p.File != tc.file || p.Pos != tc.pos || overlap != tc.overlap || set != tc.set {
			t.Errorf("%s: start %s:%d overlap %q set %v, want %s:%d overlap %q set %v", tc.name, p.File, p.Pos, overlap, set, tc.file, tc.pos, tc.overlap, tc.set)
		}
		if tc.fresh && p.GTID != "0-1-5" {
			t.Errorf("%s: gtid %q", tc.name, p.GTID)
		}
	}
}

// TestHiddenColumnErrors: a value error of an excluded or hashed column names the column, never the value.
func TestHiddenColumnErrors(t *testing.T) {
	const clear = "CLEAR-\xff-VALUE"
	for _, tc := range []struct {
		name string
		err  func(col *Column) error
	}{
		{"not UTF-8", func(col *Column) error { return notUTF8(col, []byte(clear)) }},
		{"bad value", func(col *Column) error { return badValue(col, []byte(clear), fmt.Errorf("parse %q", clear)) }},
		{"zero date", func(col *Column) error { return zeroDate(nil, col, []byte(clear), false) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			shown := tc.err(&Column{Name: "email", DataType: "varchar"}).Error()
			if !strings.Contains(shown, "CLEAR") && !strings.Contains(shown, fmt.Sprintf("%x", clear)) {
				t.Fatalf("an unprotected column's error should name the value: %s", shown)
			}
			hidden := tc.err(&Column{Name: "email", DataType: "varchar", Hidden: true}).Error()
			if strings.Contains(hidden, "CLEAR") || strings.Contains(hidden, fmt.Sprintf("%x", clear)) || !strings.Contains(hidden, "column email") {
				t.Fatalf("a hidden column's error shows the value or not the column: %s", hidden)
			}
		})
	}
}
