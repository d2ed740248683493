package source

import (
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
