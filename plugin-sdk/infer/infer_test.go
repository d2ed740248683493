package infer

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
)

func TestInfer(t *testing.T) {
	for _, tc := range []struct {
		name   string
		in     string
		reject bool
		want   string
		// errRecord and errPath, when errPath is set, are where the error must point.
		errRecord int
		errPath   string
	}{
		{name: "scalars", in: `{"s":"x","b":true,"i":1,"f":1.5,"t":"2026-01-02T03:04:05Z","n":null}`,
			want: "b:bool?, f:float64?, i:int64?, n:null?, s:utf8?, t:ts?"},
		{name: "order of first appearance", in: `{"b":1}` + "\n" + `{"c":2,"a":1}`,
			want: "b:int64?, a:int64?, c:int64?"},
		{name: "int then float", in: `{"x":1}` + "\n" + `{"x":2.5}`, want: "x:float64?"},
		{name: "float then int", in: `{"x":2.5}` + "\n" + `{"x":1}`, want: "x:float64?"},
		{name: "exponent is float", in: `{"x":1e3}`, want: "x:float64?"},
		{name: "negative zero is int", in: `{"x":-0}`, want: "x:int64?"},
		{name: "null then int", in: `{"x":null}` + "\n" + `{"x":3}`, want: "x:int64?"},
		{name: "int then null", in: `{"x":3}` + "\n" + `{"x":null}`, want: "x:int64?"},
		{name: "only nulls kept", in: `{"x":null}` + "\n" + `{"x":null,"y":1}`, want: "x:null?, y:int64?"},
		{name: "nested objects merge", in: `{"a":{"b":1}}` + "\n" + `{"a":{"c":"x"}}`, want: "a:{b:int64?, c:utf8?}?"},
		{name: "list of structs", in: `{"l":[{"a":1},{"b":true}]}`, want: "l:[{a:int64?, b:bool?}]?"},
		{name: "empty list then ints", in: `{"l":[]}` + "\n" + `{"l":[1,null]}`, want: "l:[int64]?"},
		{name: "empty list only", in: `{"l":[]}`, want: "l:[null]?"},
		{name: "nested lists widen", in: `{"l":[[1],[2.5]]}`, want: "l:[[float64]]?"},
		{name: "empty object", in: `{"o":{}}`, want: "o:{}?"},
		{name: "timestamp with offset and micros", in: `{"t":"2026-01-02T03:04:05.123456+02:00"}`, want: "t:ts?"},
		{name: "nanosecond timestamp stays text", in: `{"t":"2026-01-02T03:04:05.123456789Z"}`, want: "t:utf8?"},
		{name: "date alone is text", in: `{"t":"2026-01-02"}`, want: "t:utf8?"},
		{name: "comma fraction is text", in: `{"t":"2026-01-02T03:04:05,5Z"}`, want: "t:utf8?"},
		{name: "timestamp then text", in: `{"t":"2026-01-02T03:04:05Z"}` + "\n" + `{"t":"soon"}`, want: "t:utf8?"},
		{name: "timestamp then text under reject", reject: true, in: `{"t":"2026-01-02T03:04:05Z"}` + "\n" + `{"t":"soon"}`, want: "t:utf8?"},
		{name: "integer beyond 2^53 is marked", in: `{"x":9007199254740993}`, want: "x:int64!?"},
		{name: "integer beyond int64 is text", in: `{"x":123456789012345678901234567890}`, want: "x:utf8?"},
		{name: "float beyond float64 is text", in: `{"x":1e400}`, want: "x:utf8?"},
		{name: "big integer then float widens to text", in: `{"x":9007199254740993}` + "\n" + `{"x":1.5}`, want: "x:utf8?"},
		{name: "float then big integer widens to text", in: `{"x":1.5}` + "\n" + `{"x":-9007199254740993}`, want: "x:utf8?"},
		{name: "big integer then float rejected", reject: true, in: `{"x":9007199254740993}` + "\n" + `{"x":1.5}`, errRecord: 1, errPath: "/x"},
		{name: "int then string widens", in: `{"x":1}` + "\n" + `{"x":"a"}`, want: "x:utf8?"},
		{name: "bool then int widens", in: `{"x":true}` + "\n" + `{"x":1}`, want: "x:utf8?"},
		{name: "struct then int widens", in: `{"x":{"a":1}}` + "\n" + `{"x":1}`, want: "x:utf8?"},
		{name: "int then struct widens", in: `{"x":1}` + "\n" + `{"x":{"a":1}}`, want: "x:utf8?"},
		{name: "list then struct widens", in: `{"x":[1]}` + "\n" + `{"x":{"a":1}}`, want: "x:utf8?"},
		{name: "mixed list items widen", in: `{"x":[1,"a",true]}`, want: "x:[utf8]?"},
		{name: "string stays string with anything under widen", in: `{"x":"a"}` + "\n" + `{"x":{"b":[1]}}` + "\n" + `{"x":2}`, want: "x:utf8?"},
		{name: "int then string rejected", reject: true, in: `{"x":1}` + "\n" + `{"x":"a"}`, errRecord: 1, errPath: "/x"},
		{name: "nested conflict rejected", reject: true, in: `{"a":{"b":[1]}}` + "\n" + `{"a":{"b":[2,"x"]}}`, errRecord: 1, errPath: "/a/b/1"},
		{name: "pointer escaping", reject: true, in: `{"a/b":{"c~d":[1,"x"]}}`, errRecord: 0, errPath: "/a~1b/c~0d/1"},
		{name: "reserved name refused", in: `{"ok":1}` + "\n" + `{"_skippr_op":1}`, errRecord: 1, errPath: "/_skippr_op"},
		{name: "reserved prefix allowed when nested", in: `{"a":{"_skippr_op":1}}`, want: "a:{_skippr_op:int64?}?"},
		{name: "too deep", in: `{"a":` + strings.Repeat(`[`, MaxDepth) + strings.Repeat(`]`, MaxDepth) + `}`, errRecord: 0, errPath: "/a" + strings.Repeat("/0", MaxDepth-1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opt := Options{}
			if tc.reject {
				opt.Conflict = Reject
			}
			fs, err := Infer(mustNDJSON(tc.in), opt)
			if tc.errPath != "" {
				var ie *Error
				if !errors.As(err, &ie) {
					t.Fatalf("got %v (%s), want an *Error at record %d %s", err, sig(fs), tc.errRecord, tc.errPath)
				}
				if ie.Record != tc.errRecord || ie.Path != tc.errPath {
					t.Fatalf("error %q points at record %d %s, want record %d %s", err, ie.Record, ie.Path, tc.errRecord, tc.errPath)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := sig(fs); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestInferDeepButAllowed(t *testing.T) {
	// MaxDepth-1 nested arrays below a top-level field is the deepest that is taken.
	in := `{"a":` + strings.Repeat(`[`, MaxDepth-1) + strings.Repeat(`]`, MaxDepth-1) + `}`
	if _, err := Infer(mustNDJSON(in), Options{}); err != nil {
		t.Fatal(err)
	}
}

func TestEvolve(t *testing.T) {
	keyed := func(fs []arrow.Field) []arrow.Field {
		for i := range fs {
			if fs[i].Name == "id" {
				fs[i].Nullable = false
			}
		}
		return fs
	}
	for _, tc := range []struct {
		name        string
		current     string // records the current schema is inferred from
		key         bool   // make the current field "id" non-nullable
		in          string
		reject      bool
		want        string
		wantChanged bool
		errRecord   int
		errPath     string
	}{
		{name: "same shape is unchanged", current: `{"id":1,"a":{"b":"x"}}`, in: `{"id":2,"a":{"b":"y"}}` + "\n" + `{"id":3}`,
			want: "a:{b:utf8?}?, id:int64?"},
		{name: "subset is unchanged", current: `{"id":1,"a":"x"}`, in: `{"a":"y"}`, want: "a:utf8?, id:int64?"},
		{name: "new top-level field appended", current: `{"id":1,"a":"x"}`, in: `{"z":true,"b":1}`,
			want: "a:utf8?, id:int64?, b:int64?, z:bool?", wantChanged: true},
		{name: "new nested field appended", current: `{"id":1,"a":{"b":"x"}}`, in: `{"a":{"a":1,"b":"y"}}`,
			want: "a:{b:utf8?, a:int64?}?, id:int64?", wantChanged: true},
		{name: "widening", current: `{"id":1,"v":1}`, in: `{"v":0.5}`, want: "id:int64?, v:float64?", wantChanged: true},
		{name: "null-only takes the first real type", current: `{"id":1,"v":null}`, in: `{"v":{"x":[1]}}`,
			want: "id:int64?, v:{x:[int64]?}?", wantChanged: true},
		{name: "big integer marks the field", current: `{"id":1}`, in: `{"id":9007199254740993}`, want: "id:int64!?", wantChanged: true},
		{name: "missing key becomes nullable", current: `{"id":1,"a":1}`, key: true, in: `{"a":2}`, want: "a:int64?, id:int64?", wantChanged: true},
		{name: "present key stays required", current: `{"id":1,"a":1}`, key: true, in: `{"id":2}`, want: "a:int64?, id:int64"},
		{name: "conflict names the new record", current: `{"id":1,"a":1}`, reject: true, in: `{"a":2}` + "\n" + `{"a":[2]}`, errRecord: 1, errPath: "/a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opt := Options{}
			if tc.reject {
				opt.Conflict = Reject
			}
			cur, err := Infer(mustNDJSON(tc.current), opt)
			if err != nil {
				t.Fatal(err)
			}
			if tc.key {
				cur = keyed(cur)
			}
			before := sig(cur)
			fs, changed, err := Evolve(cur, mustNDJSON(tc.in), opt)
			if sig(cur) != before {
				t.Errorf("Evolve modified current: %s became %s", before, sig(cur))
			}
			if tc.errPath != "" {
				var ie *Error
				if !errors.As(err, &ie) || ie.Record != tc.errRecord || ie.Path != tc.errPath {
					t.Fatalf("got %v, want an *Error at record %d %s", err, tc.errRecord, tc.errPath)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := sig(fs); got != tc.want || changed != tc.wantChanged {
				t.Errorf("got  %s changed=%v\nwant %s changed=%v", got, changed, tc.want, tc.wantChanged)
			}
		})
	}
}

func TestEvolveRefusesUnmanagedTypes(t *testing.T) {
	for _, f := range []arrow.Field{
		{Name: "n", Type: arrow.PrimitiveTypes.Int32},
		{Name: "t", Type: &arrow.TimestampType{Unit: arrow.Nanosecond, TimeZone: "UTC"}},
		{Name: "s", Type: arrow.StructOf(arrow.Field{Name: "d", Type: arrow.FixedWidthTypes.Date32})},
	} {
		_, _, err := Evolve([]arrow.Field{f}, mustNDJSON(`{"x":1}`), Options{})
		if err == nil || !strings.Contains(err.Error(), "/"+f.Name) {
			t.Errorf("field %s (%s): got %v, want an error naming the field", f.Name, f.Type, err)
		}
	}
}

func TestMerge(t *testing.T) {
	for _, tc := range []struct {
		name, a, b  string
		reject      bool
		want        string
		wantChanged bool
		wantErr     string
	}{
		{name: "union", a: `{"x":1,"s":{"a":1}}`, b: `{"y":"t","s":{"b":[1.5]}}`, want: "s:{a:int64?, b:[float64]?}?, x:int64?, y:utf8?", wantChanged: true},
		{name: "subset unchanged", a: `{"x":1,"y":"a"}`, b: `{"y":"b"}`, want: "x:int64?, y:utf8?"},
		{name: "null-only on either side", a: `{"x":null,"y":1}`, b: `{"x":true,"y":null}`, want: "x:bool?, y:int64?", wantChanged: true},
		{name: "widen", a: `{"x":1}`, b: `{"x":2.5}`, want: "x:float64?", wantChanged: true},
		{name: "conflict widened", a: `{"x":1}`, b: `{"x":{"a":1}}`, want: "x:utf8?", wantChanged: true},
		{name: "conflict rejected", a: `{"s":{"x":1}}`, b: `{"s":{"x":[1]}}`, reject: true, wantErr: "field /s/x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opt := Options{}
			if tc.reject {
				opt.Conflict = Reject
			}
			a, err := Infer(mustNDJSON(tc.a), Options{})
			if err != nil {
				t.Fatal(err)
			}
			b, err := Infer(mustNDJSON(tc.b), Options{})
			if err != nil {
				t.Fatal(err)
			}
			fs, changed, err := Merge(a, b, opt)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := sig(fs); got != tc.want || changed != tc.wantChanged {
				t.Errorf("got  %s changed=%v\nwant %s changed=%v", got, changed, tc.want, tc.wantChanged)
			}
		})
	}
}

func TestErrorMessage(t *testing.T) {
	_, err := Infer(mustNDJSON(`{"a":1}`+"\n"+`{"a":"x"}`), Options{Conflict: Reject})
	want := `record 1, field /a: type conflict: the field is int64, the value is a string`
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("got %q, want it to start with %q", err, want)
	}
	_, err = Infer(mustNDJSON(`{"a":1}`+"\n"+`{"a":123456789012345678901234567890}`), Options{Conflict: Reject})
	if err == nil || !strings.Contains(err.Error(), "beyond int64 or float64 can only be kept as text") {
		t.Fatalf("got %q, want it to explain why a huge number is text", err)
	}
}

func TestWideRecords(t *testing.T) {
	// Past 8 fields a struct finds its children through an index; it must stay right as fields are appended.
	var first, second []string
	for i := range 40 {
		first = append(first, fmt.Sprintf(`"f%02d":%d`, i, i))
	}
	for i := 30; i < 60; i += 2 {
		second = append(second, fmt.Sprintf(`"f%02d":{"x":%d}`, i, i))
	}
	recs := mustNDJSON("{" + strings.Join(first, ",") + "}\n{" + strings.Join(second, ",") + "}")
	fs, err := Infer(recs, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 50 {
		t.Fatalf("%d fields, want 50", len(fs))
	}
	for i, f := range fs {
		name, want := fmt.Sprintf("f%02d", i), "int64"
		switch {
		case i >= 40:
			name, want = fmt.Sprintf("f%02d", 40+2*(i-40)), "{x:int64?}"
		case i >= 30 && i%2 == 0:
			want = "utf8" // int and struct clash
		}
		if f.Name != name || typeSig(f.Type, f.Metadata) != want {
			t.Errorf("field %d: %s %s, want %s %s", i, f.Name, typeSig(f.Type, f.Metadata), name, want)
		}
	}
	if _, changed, err := Evolve(fs, recs, Options{}); err != nil || changed {
		t.Fatalf("the schema does not hold its own records: changed=%v err=%v", changed, err)
	}
}
