package infer

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
)

func rowsOf(recs []map[string]any) []Row {
	rows := make([]Row, len(recs))
	for i, r := range recs {
		rows[i] = Row{Op: change.OpInsert, Value: r}
	}
	return rows
}

func TestBuildRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name   string
		in     string
		reject bool
	}{
		{name: "scalars and nulls", in: `{"b":true,"i":-7,"f":0.1,"s":"x","t":"2026-01-02T03:04:05.000001+05:30","n":null}` + "\n" + `{"i":9007199254740993}`},
		{name: "nested", in: `{"a":{"b":[{"c":1},{"c":2.5,"d":"2026-01-02T03:04:05Z"}],"e":{}}}` + "\n" + `{"a":null}` + "\n" + `{"a":{"b":[null]}}`},
		{name: "int column holds ints widened to float", in: `{"x":1}` + "\n" + `{"x":1.25}` + "\n" + `{"x":-9007199254740992}`},
		{name: "widened to text", in: `{"x":1.50}` + "\n" + `{"x":{"k":[1,"<&>"],"j":false}}` + "\n" + `{"x":true}` + "\n" + `{"x":"2026-01-02T03:04:05Z"}`},
		{name: "huge numbers as text", in: `{"x":123456789012345678901234567890,"y":-1e999}`, reject: true},
		{name: "timestamps and text under reject", in: `{"t":"2026-01-02T03:04:05Z"}` + "\n" + `{"t":"later"}`, reject: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer mem.AssertSize(t, 0)
			opt := Options{}
			if tc.reject {
				opt.Conflict = Reject
			}
			recs := mustNDJSON(tc.in)
			fs, err := Infer(recs, opt)
			if err != nil {
				t.Fatal(err)
			}
			rec, err := Build(mem, change.Schema(fs, nil), rowsOf(recs), opt)
			if err != nil {
				t.Fatal(err)
			}
			defer rec.Release()
			out := rowsToGo(rec)
			for i := range recs {
				for k, v := range recs[i] {
					if err := sameValue(v, out[i][k], "/"+k); err != nil {
						t.Errorf("record %d: %v", i, err)
					}
				}
			}
		})
	}
}

func TestBuildTypedValues(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	recs := mustNDJSON(`{"n":1.5,"x":{"k":[1,"<&>"]},"t":"2026-01-02T03:04:05.5+01:00"}` + "\n" + `{"x":7}`)
	fs, err := Infer(recs, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := sig(fs), "n:float64?, t:ts?, x:utf8?"; got != want {
		t.Fatalf("schema %s, want %s", got, want)
	}
	rows := rowsOf(recs)
	rows[0].Pos, rows[1].Op = "p0", change.OpDelete
	rec, err := Build(mem, change.Schema(fs, nil), rows, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	// Objects become compact JSON without HTML escaping; numbers keep their text.
	if got := rec.Column(2).(*array.String).Value(0); got != `{"k":[1,"<&>"]}` {
		t.Errorf("object as text: %s", got)
	}
	if got := rec.Column(2).(*array.String).Value(1); got != "7" {
		t.Errorf("number as text: %s", got)
	}
	want := time.Date(2026, 1, 2, 2, 4, 5, 500_000_000, time.UTC)
	if got := rec.Column(1).(*array.Timestamp).Value(0); got != arrow.Timestamp(want.UnixMicro()) {
		t.Errorf("timestamp %v, want %v", got, want)
	}
	ops, err := change.Ops(rec)
	if err != nil {
		t.Fatal(err)
	}
	if ops.Value(0) != int8(change.OpInsert) || ops.Value(1) != int8(change.OpDelete) {
		t.Errorf("ops %v", ops)
	}
	pos := rec.Column(4).(*array.String)
	if pos.Value(0) != "p0" || !pos.IsNull(1) {
		t.Errorf("positions %v", pos)
	}
}

func TestBuildErrors(t *testing.T) {
	base := mustNDJSON(`{"id":1,"i":1,"s":"x","t":"2026-01-02T03:04:05Z","n":null,"o":{"a":[1]},"b":true}`)
	fs, err := Infer(base, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range fs {
		if fs[i].Name == "id" {
			fs[i].Nullable = false
		}
	}
	schema := change.Schema(fs, []string{"id"})
	for _, tc := range []struct {
		name    string
		in      string
		reject  bool
		path    string
		wantErr bool
	}{
		{name: "fits", in: `{"id":2}` + "\n" + `{"id":3,"i":4,"o":{"a":[]}}`},
		{name: "float into int column", in: `{"id":2}` + "\n" + `{"id":3,"i":4.5}`, path: "/i", wantErr: true},
		{name: "unknown top-level field", in: `{"id":2,"zz":1,"yy":2}`, path: "/yy", wantErr: true},
		{name: "unknown nested field", in: `{"id":2,"o":{"a":[1],"b":2}}`, path: "/o/b", wantErr: true},
		{name: "missing required", in: `{"id":2}` + "\n" + `{"i":1}`, path: "/id", wantErr: true},
		{name: "value in null-only column", in: `{"id":2,"n":5}`, path: "/n", wantErr: true},
		{name: "number into text column under reject", in: `{"id":2,"s":5}`, reject: true, path: "/s", wantErr: true},
		{name: "number into text column under widen", in: `{"id":2,"s":5}`},
		{name: "text into timestamp column", in: `{"id":2,"t":"tomorrow"}`, path: "/t", wantErr: true},
		{name: "list item conflict", in: `{"id":2,"o":{"a":[1,"x"]}}`, path: "/o/a/1", wantErr: true},
		{name: "object into list column", in: `{"id":2,"o":{"a":{}}}`, path: "/o/a", wantErr: true},
		{name: "int into bool column", in: `{"id":2,"b":1}`, path: "/b", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer mem.AssertSize(t, 0)
			opt := Options{}
			if tc.reject {
				opt.Conflict = Reject
			}
			recs := mustNDJSON(tc.in)
			rec, err := Build(mem, schema, rowsOf(recs), opt)
			if !tc.wantErr {
				if err != nil {
					t.Fatal(err)
				}
				if rec.NumRows() != int64(len(recs)) {
					t.Errorf("%d rows, want %d", rec.NumRows(), len(recs))
				}
				rec.Release()
				return
			}
			var ie *Error
			if !errors.As(err, &ie) || ie.Record != len(recs)-1 || ie.Path != tc.path {
				t.Fatalf("got %v, want an *Error at record %d %s", err, len(recs)-1, tc.path)
			}
		})
	}
}

func TestBuildRefusesNonChangeSchema(t *testing.T) {
	s := arrow.NewSchema([]arrow.Field{{Name: "a", Type: arrow.PrimitiveTypes.Int64}}, nil)
	if _, err := Build(memory.DefaultAllocator, s, nil, Options{}); err == nil {
		t.Fatal("Build took a schema without the change columns")
	}
}

func TestText(t *testing.T) {
	for _, tc := range []struct {
		in   any
		want string
	}{
		{"a", "a"},
		{json.Number("1.50"), "1.50"},
		{true, "true"},
		{0.25, "0.25"},
		{int64(-3), "-3"},
		{map[string]any{"b": []any{json.Number("1"), nil}, "a": "<"}, `{"a":"<","b":[1,null]}`},
	} {
		got, err := Text(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("Text(%v) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}
