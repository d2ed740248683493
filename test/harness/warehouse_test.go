package harness

import (
	"encoding/json"
	"math"
	"testing"
)

func TestSameWarehouseValue(t *testing.T) {
	for _, c := range []struct {
		name     string
		dst, src any
		want     bool
	}{
		{"same number, other scale", json.Number("1.250"), json.Number("1.25"), true},
		{"numbers a float64 would merge", json.Number("0.30000000000000004"), json.Number("0.3"), false},
		{"instant in two zones", "2024-01-02T03:04:05.123456Z", "2024-01-02T08:34:05.123456+05:30", true},
		{"a microsecond apart", "2024-01-02T03:04:05.123456Z", "2024-01-02T03:04:05.123457Z", false},
		{"jsonb as VARCHAR text", `{"k": 1, "a": [1, 2]}`, map[string]any{"k": json.Number("1"), "a": []any{json.Number("1"), json.Number("2")}}, true},
		{"jsonb text differing", `{"k": 2}`, map[string]any{"k": json.Number("1")}, false},
		{"arrays element by element", []any{json.Number("1.0"), "x"}, []any{json.Number("1"), "x"}, true},
		{"array lost an element", []any{"x"}, []any{"x", nil}, false},
		{"object missing a key", map[string]any{"a": nil}, map[string]any{"a": nil, "b": nil}, false},
		{"text against number", "1", json.Number("1"), true}, // a VARCHAR holding JSON text of a number
		{"null against value", nil, "x", false},
	} {
		if got := SameWarehouseValue(c.dst, c.src); got != c.want {
			t.Errorf("%s: SameWarehouseValue(%#v, %#v) = %v, want %v", c.name, c.dst, c.src, got, c.want)
		}
	}
}

// TestSnowflakeValues: the live reader's conversions give the stand-in's forms (PostgreSQL's JSON of its
// storage), so one comparison serves both.
func TestSnowflakeValues(t *testing.T) {
	for _, c := range []struct {
		typ  string
		in   any
		want any
	}{
		{"NUMBER", "200.0000", json.Number("200.0000")},
		{"FIXED", "-9223372036854775808", json.Number("-9223372036854775808")},
		{"FLOAT", 0.1, json.Number("0.1")},
		{"FLOAT", math.Copysign(0, -1), json.Number("-0")},
		{"FLOAT", math.NaN(), "NaN"},
		{"FLOAT", math.Inf(-1), "-Infinity"},
		{"FLOAT", "inf", "Infinity"},
		{"BINARY", []byte{0, 0xff, 0x10}, `\x00ff10`},
		{"BOOLEAN", true, true},
		{"ARRAY", `[1,"a",null]`, []any{json.Number("1"), "a", nil}},
		{"TEXT", "ünï", "ünï"},
		{"DATE", "2024-02-29", "2024-02-29"},
		{"TEXT", nil, nil},
	} {
		got, err := sfValue(c.typ, c.in)
		if err != nil {
			t.Errorf("%s %#v: %v", c.typ, c.in, err)
			continue
		}
		gj, _ := json.Marshal(got)
		wj, _ := json.Marshal(c.want)
		if string(gj) != string(wj) {
			t.Errorf("%s %#v: got %#v, want %#v", c.typ, c.in, got, c.want)
		}
	}
}
