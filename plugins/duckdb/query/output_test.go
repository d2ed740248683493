package query

import (
	"math/big"
	"testing"

	"github.com/duckdb/duckdb-go/v2"
)

func TestDecimalString(t *testing.T) {
	for _, c := range []struct {
		v     int64
		scale uint8
		want  string
	}{
		{0, 2, "0.00"}, {150, 2, "1.50"}, {-5, 3, "-0.005"}, {4200, 2, "42.00"}, {7, 0, "7"}, {-123456, 2, "-1234.56"},
	} {
		if got := decimalString(duckdb.Decimal{Width: 12, Scale: c.scale, Value: big.NewInt(c.v)}); got != c.want {
			t.Errorf("%d scale %d: %q, want %q", c.v, c.scale, got, c.want)
		}
	}
}
