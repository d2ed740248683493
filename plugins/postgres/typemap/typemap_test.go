package typemap

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/values"
)

func ptr(s string) *string { return &s }

func TestParseArray(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []*string
		err  string
	}{
		{in: "{}", want: nil},
		{in: "{1,2,3}", want: []*string{ptr("1"), ptr("2"), ptr("3")}},
		{in: `{NULL,"NULL",null}`, want: []*string{nil, ptr("NULL"), nil}},
		{in: `{"a,b","q\"uote","back\\slash",""}`, want: []*string{ptr("a,b"), ptr(`q"uote`), ptr(`back\slash`), ptr("")}},
		{in: "[0:1]={7,8}", want: []*string{ptr("7"), ptr("8")}},
		{in: "{{1,2},{3,4}}", err: "multi-dimensional"},
		{in: "[1:2][1:2]={{1,2},{3,4}}", err: "multi-dimensional"},
		{in: `{"unterminated}`, err: "unterminated"},
		{in: "1,2", err: "want {...}"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseArray(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, want an error containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %d elements, want %d", len(got), len(tc.want))
			}
			for i := range got {
				if (got[i] == nil) != (tc.want[i] == nil) || (got[i] != nil && *got[i] != *tc.want[i]) {
					t.Errorf("element %d: got %v, want %v", i, deref(got[i]), deref(tc.want[i]))
				}
			}
		})
	}
}

func deref(s *string) string {
	if s == nil {
		return "<NULL>"
	}
	return `"` + *s + `"`
}

func TestParseDecimal(t *testing.T) {
	for _, tc := range []struct {
		in        string
		p, s      int32
		want, err string
	}{
		{in: "200.00", p: 10, s: 2, want: "200.00"},
		{in: "-0.05", p: 4, s: 2, want: "-0.05"},
		{in: "12345678901234567890.1234", p: 24, s: 4, want: "12345678901234567890.1234"},
		{in: "99999999999999999999999999999999999999", p: 38, s: 0, want: "99999999999999999999999999999999999999"},
		{in: "1.5", p: 3, s: 2, want: "1.50"},
		{in: "NaN", p: 10, s: 2, err: "cannot be represented"},
		{in: "1.234", p: 10, s: 2, err: "more than 2 decimal places"},
		{in: "123456", p: 4, s: 0, err: "does not fit"},
		{in: "1e5", p: 10, s: 0, err: "not a decimal"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			n, err := ParseDecimal(tc.in, tc.p, tc.s)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, want an error containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := n.ToString(tc.s); got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}

// Dates and timestamps go text → Arrow → text; the text must come back the same.
func TestDateTimeRoundTrip(t *testing.T) {
	for _, in := range []string{"2024-02-29", "1970-01-01", "1969-12-31", "0001-01-01", "0001-12-31 BC", "4713-01-01 BC", "5874897-12-31", "2000-03-01", "1900-02-28"} {
		d, err := ParseDate(in)
		if err != nil {
			t.Errorf("ParseDate(%q): %v", in, err)
			continue
		}
		if got := string(AppendDate(nil, int64(d))); got != in {
			t.Errorf("date %q came back as %q", in, got)
		}
	}
	for _, tc := range []struct{ in, out string }{
		{"2024-01-02 03:04:05.123456", "2024-01-02 03:04:05.123456"},
		{"1969-12-31 23:59:59.5", "1969-12-31 23:59:59.500000"},
		{"0001-01-01 00:00:00 BC", "0001-01-01 00:00:00 BC"},
		{"294247-01-10 04:00:54.775806", "294247-01-10 04:00:54.775806"}, // the last microsecond before infinity's
		{"294247-01-10 04:00:59.775806+00:00:05", "294247-01-10 04:00:54.775806"},
		{"2024-01-02 03:04:05+05:30", "2024-01-01 21:34:05"},
		{"2024-01-02 03:04:05-08", "2024-01-02 11:04:05"},
		{"1900-01-01 00:00:00+00:19:32", "1899-12-31 23:40:28"},
	} {
		us, err := ParseTimestamp(tc.in)
		if err != nil {
			t.Errorf("ParseTimestamp(%q): %v", tc.in, err)
			continue
		}
		if got := string(AppendTimestamp(nil, arrow.Timestamp(us), arrow.Microsecond, false)); got != tc.out {
			t.Errorf("timestamp %q came back as %q, want %q", tc.in, got, tc.out)
		}
	}
	// What Arrow cannot hold is Unrepresentable (the policy's to decide), never a stand-in value.
	for _, tc := range []struct {
		in     string
		parse  func(string) error
		reason string
	}{
		{"294276-12-31 23:59:59", tsErr, "outside the range of timestamp[us]"},
		{"294247-01-10 04:00:54.775808", tsErr, "outside the range of timestamp[us]"},
		{"294247-01-10 04:00:54.775807-00:00:01", tsErr, "outside the range of timestamp[us]"},
		// int64's last microsecond is a legal PostgreSQL timestamp, but it carries infinity.
		{"294247-01-10 04:00:54.775807", tsErr, "the next microsecond carries infinity"},
		{"294247-01-10 04:00:59.775807+00:00:05", tsErr, "the next microsecond carries infinity"},
		{"NaN", decErr, "numeric NaN cannot be represented as decimal128(10,2)"},
		{"-Infinity", decErr, "numeric -Infinity cannot be represented"},
	} {
		var u *values.Unrepresentable
		err := tc.parse(tc.in)
		if !errors.As(err, &u) || u.Value != tc.in || !strings.Contains(u.Reason, tc.reason) {
			t.Errorf("%q: got %v, want an Unrepresentable %q with %q", tc.in, err, tc.in, tc.reason)
		}
	}
	for _, in := range []string{"00:00:00", "23:59:59.999999", "24:00:00", "12:30:00.5"} {
		us, err := ParseTime(in)
		if err != nil {
			t.Fatal(err)
		}
		if back, _ := ParseTime(string(appendClock(nil, us))); back != us {
			t.Errorf("time %q: %d came back as %d", in, us, back)
		}
	}
}

// ±infinity in dates and timestamps, text and binary alike, is carried as plugin-sdk/values names it and
// encodes back to the word; no finite value encodes to it.
func TestInfinityRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		typ  *Type
		in   string
		want int64
	}{
		{&Type{Name: "timestamp", Kind: KindTimestamp}, "infinity", int64(values.TimestampInfinity)},
		{&Type{Name: "timestamp", Kind: KindTimestamp}, "-infinity", int64(values.TimestampNegInfinity)},
		{&Type{Name: "timestamptz", Kind: KindTimestampTZ}, "infinity", int64(values.TimestampInfinity)},
		{&Type{Name: "timestamptz", Kind: KindTimestampTZ}, "-infinity", int64(values.TimestampNegInfinity)},
		{&Type{Name: "date", Kind: KindDate}, "infinity", int64(values.DateInfinity)},
		{&Type{Name: "date", Kind: KindDate}, "-infinity", int64(values.DateNegInfinity)},
		{&Type{Name: "timestamp", Kind: KindTimestamp}, "4713-01-01 00:00:00 BC", -210863520000000000},
		{&Type{Name: "date", Kind: KindDate}, "4713-01-01 BC", -2440550},
	} {
		b := array.NewBuilder(memory.DefaultAllocator, tc.typ.Arrow())
		if err := Append(tc.typ, b, []byte(tc.in)); err != nil {
			t.Fatalf("%s %s: %v", tc.typ.Name, tc.in, err)
		}
		arr := b.NewArray()
		b.Release()
		var got int64
		switch a := arr.(type) {
		case *array.Timestamp:
			got = int64(a.Value(0))
		case *array.Date32:
			got = int64(a.Value(0))
		}
		enc, err := NewEncoder(Field("c", tc.typ), arr)
		if err != nil {
			t.Fatal(err)
		}
		back := string(enc(nil, 0))
		if tc.typ.Kind == KindTimestampTZ && tc.in[0] != '-' && tc.in[0] != 'i' {
			back = strings.TrimSuffix(back, "+00")
		}
		if got != tc.want || back != tc.in {
			t.Errorf("%s %s: carried as %d and written back as %q, want %d and %q", tc.typ.Name, tc.in, got, back, tc.want, tc.in)
		}
		arr.Release()
	}
	for _, tc := range []struct {
		pg   int64 // PostgreSQL's binary form: microseconds since 2000
		want int64
	}{
		{math.MaxInt64, int64(values.TimestampInfinity)},
		{math.MinInt64, int64(values.TimestampNegInfinity)},
	} {
		if got, err := timestampBinary(tc.pg, false); err != nil || got != tc.want {
			t.Errorf("binary %d: %d, %v; want %d", tc.pg, got, err, tc.want)
		}
	}
	var u *values.Unrepresentable
	if _, err := timestampBinary(math.MaxInt64-pgEpochMicros, false); !errors.As(err, &u) {
		t.Errorf("binary timestamp at int64's last microsecond since 1970: %v, want Unrepresentable (it carries infinity)", err)
	}
}

func tsErr(s string) error   { _, err := ParseTimestamp(s); return err }
func dateErr(s string) error { _, err := ParseDate(s); return err }
func decErr(s string) error  { _, err := ParseDecimal(s, 10, 2); return err }

func TestParseInterval(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want arrow.MonthDayNanoInterval
	}{
		{"PT0S", arrow.MonthDayNanoInterval{}},
		{"P1Y2M3DT4H5M6.789S", arrow.MonthDayNanoInterval{Months: 14, Days: 3, Nanoseconds: (4*3600+5*60+6)*1e9 + 789e6}},
		{"P-1Y2DT-3H-0.000001S", arrow.MonthDayNanoInterval{Months: -12, Days: 2, Nanoseconds: -3*3600e9 - 1000}},
		{"PT-0.5S", arrow.MonthDayNanoInterval{Nanoseconds: -5e8}},
	} {
		got, err := ParseInterval(tc.in)
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		if got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.in, got, tc.want)
		}
	}
	if _, err := ParseInterval("1 year"); err == nil {
		t.Error("an interval in postgres style must be refused (the session sets iso_8601)")
	}
}

// A list column decodes through its element type and encodes back to an array literal.
func TestListAppendEncode(t *testing.T) {
	typ := &Type{Name: "numeric(6,2)[]", Kind: KindList, Elem: &Type{Name: "numeric(6,2)", Kind: KindDecimal, Precision: 6, Scale: 2}}
	b := array.NewBuilder(memory.DefaultAllocator, typ.Arrow())
	defer b.Release()
	for _, v := range []string{"{1.50,NULL,-2.25}", "{}"} {
		if err := Append(typ, b, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	arr := b.NewArray()
	defer arr.Release()
	enc, err := NewEncoder(Field("c", typ), arr)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{`{"1.50",NULL,"-2.25"}`, "{}"} {
		if got := string(enc(nil, i)); got != want {
			t.Errorf("row %d: got %s, want %s", i, got, want)
		}
	}
	if err := Append(typ, b, []byte("{1.234}")); err == nil {
		t.Error("a value with more decimals than the column's scale must fail")
	}
}

// An element the element type cannot hold becomes NULL in a whole list, reported as Appended so the caller
// neither appends a second value nor loses the row's shape.
func TestListUnrepresentableElement(t *testing.T) {
	typ := &Type{Name: "timestamp[]", Kind: KindList, Elem: &Type{Name: "timestamp", Kind: KindTimestamp}}
	b := array.NewBuilder(memory.DefaultAllocator, typ.Arrow())
	defer b.Release()
	err := Append(typ, b, []byte(`{"2024-01-01 00:00:00","294276-12-31 23:59:59"}`))
	var u *values.Unrepresentable
	if !errors.As(err, &u) || !u.Appended || !strings.Contains(u.Reason, "element 2 (294276-12-31 23:59:59)") {
		t.Fatalf("got %v, want an Appended Unrepresentable naming element 2", err)
	}
	arr := b.NewArray()
	defer arr.Release()
	if arr.Len() != 1 || arr.String() != "[[1704067200000000 (null)]]" {
		t.Errorf("list is %s, want one list with the first element and a NULL", arr)
	}
}

// Arrays a list cannot carry exactly: two dimensions (nothing appended: the caller writes NULL) and bounds
// other than 1 (the elements appended, the bounds reported as dropped).
func TestArraysAListCannotHold(t *testing.T) {
	typ := &Type{Name: "integer[]", Kind: KindList, Elem: &Type{Name: "integer", Kind: KindInt32}}
	for _, tc := range []struct {
		in, reason, list string
		appended         bool
	}{
		{"{{1,2},{3,4}}", "more than one dimension", "[]", false},
		{"[1:2][1:2]={{1,2},{3,4}}", "more than one dimension", "[]", false},
		{"[0:2]={7,8,9}", "array bounds [0:2] dropped", "[[7 8 9]]", true},
	} {
		b := array.NewBuilder(memory.DefaultAllocator, typ.Arrow())
		err := Append(typ, b, []byte(tc.in))
		var u *values.Unrepresentable
		if !errors.As(err, &u) || u.Appended != tc.appended || !strings.Contains(u.Reason, tc.reason) || u.Value != tc.in {
			t.Errorf("%s: got %v, want Unrepresentable %q (appended %v)", tc.in, err, tc.reason, tc.appended)
		}
		arr := b.NewArray()
		if arr.String() != tc.list {
			t.Errorf("%s: list %s, want %s", tc.in, arr, tc.list)
		}
		arr.Release()
		b.Release()
	}
}

// Strings and booleans take their own path in Append (no string copy): values, refusals, and a builder that
// does not keep the caller's buffer.
func TestAppendStringAndBool(t *testing.T) {
	for _, tc := range []struct {
		typ     *Type
		in      string
		want    string // the appended value as fmt prints it
		wantErr bool
	}{
		{&Type{Name: "text", Kind: KindString}, "héllo", "héllo", false},
		{&Type{Name: "jsonb", Kind: KindString}, `{"k": 1}`, `{"k": 1}`, false},
		{&Type{Name: "text", Kind: KindString}, "", "", false},
		{&Type{Name: "text", Kind: KindString}, "\xff", "", true},
		{&Type{Name: "boolean", Kind: KindBool}, "t", "true", false},
		{&Type{Name: "boolean", Kind: KindBool}, "f", "false", false},
		{&Type{Name: "boolean", Kind: KindBool}, "true", "", true},
		{&Type{Name: "boolean", Kind: KindBool}, "", "", true},
	} {
		b := array.NewBuilder(memory.DefaultAllocator, tc.typ.Arrow())
		in := []byte(tc.in)
		err := Append(tc.typ, b, in)
		for i := range in {
			in[i] = 'X' // the caller's buffer is reused
		}
		arr := b.NewArray()
		b.Release()
		if (err != nil) != tc.wantErr {
			t.Errorf("%s %q: error %v, want error %v", tc.typ.Name, tc.in, err, tc.wantErr)
		} else if err == nil {
			if got := arr.ValueStr(0); got != tc.want {
				t.Errorf("%s %q: appended %q, want %q", tc.typ.Name, tc.in, got, tc.want)
			}
		}
		arr.Release()
	}
}

func TestParseTimestampRefusesBadOffsets(t *testing.T) {
	for _, in := range []string{"2024-01-02 03:04:05+01:02:03:04", "2024-01-02 03:04:05+", "2024-01-02 03:04:05+ab", "2024-01-02 03:04:05+01::03", "2024-01-02 03:04:05+01:"} {
		if us, err := ParseTimestamp(in); err == nil {
			t.Errorf("ParseTimestamp(%q) = %d, want an error", in, us)
		}
	}
}
