package typemap

import (
	"encoding/binary"
	"strings"
	"testing"
)

// numeric builds numeric's binary form.
func numeric(weight int16, sign uint16, dscale int16, digits ...uint16) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(len(digits)))
	b = binary.BigEndian.AppendUint16(b, uint16(weight))
	b = binary.BigEndian.AppendUint16(b, sign)
	b = binary.BigEndian.AppendUint16(b, uint16(dscale))
	for _, d := range digits {
		b = binary.BigEndian.AppendUint16(b, d)
	}
	return b
}

// TestNumericBinary covers forms the server does not send for a constrained column (so TestBinaryMatchesText
// cannot): trailing zero groups, damaged values, and values past the column's precision or scale.
func TestNumericBinary(t *testing.T) {
	for _, c := range []struct {
		name             string
		in               []byte
		precision, scale int32
		want, err        string
	}{
		{"zero", numeric(0, numericPos, 2), 10, 2, "0.00", ""},
		{"trailing zero groups", numeric(1, numericPos, 0, 12, 0), 10, 2, "120000.00", ""},
		{"weight above the digits", numeric(3, numericPos, 0, 5), 20, 0, "5000000000000", ""},
		{"fraction padded in its group", numeric(0, numericNeg, 2, 1234, 5600), 12, 2, "-1234.56", ""},
		{"big", numeric(9, numericPos, 0, 99, 9999, 9999, 9999, 9999, 9999, 9999, 9999, 9999, 9999), 38, 0, "99999999999999999999999999999999999999", ""},
		{"past the scale", numeric(-1, numericPos, 4, 1), 10, 2, "", "more than 2 decimal places"},
		{"past the precision", numeric(1, numericPos, 0, 1, 0), 4, 0, "", "does not fit"},
		{"past 38 digits", numeric(10, numericPos, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1), 38, 0, "", "does not fit"},
		{"NaN", numeric(0, numericNaN, 0), 10, 2, "", "NaN cannot be represented"},
		{"not base 10000", numeric(0, numericPos, 0, 10000), 10, 0, "", "not base 10000"},
		{"short", []byte{0, 1, 0}, 10, 0, "", "too short"},
		{"digits missing", numeric(0, numericPos, 0, 1)[:9], 10, 0, "", "holds 1 digits"},
		{"unknown sign", numeric(0, 0x1234, 0, 1), 10, 0, "", "unknown sign"},
	} {
		t.Run(c.name, func(t *testing.T) {
			n, err := NumericBinary(c.in, c.precision, c.scale)
			switch {
			case c.err != "":
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one with %q", err, c.err)
				}
			case err != nil:
				t.Fatal(err)
			case n.ToString(c.scale) != c.want:
				t.Fatalf("got %s, want %s", n.ToString(c.scale), c.want)
			}
		})
	}
}
