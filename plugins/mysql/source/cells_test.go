package source

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"vitess.io/vitess/go/mysql/binlog"
	querypb "vitess.io/vitess/go/vt/proto/query"
)

// cellCase is one binlog cell of a column, in MySQL's binary row format.
type cellCase struct {
	col  Column
	typ  byte
	meta uint16
	v    []byte
}

// TestCellFastPath: every cell the direct decoder takes becomes the same Arrow value (or the same refusal)
// as vitess's text form parsed by appendValue, the path every other cell still takes. The cells are edge
// values and a few thousand random ones of each type and width. Breaking any branch of appendCellFast (a
// sign extension, a fraction's scale, a decimal group) fails it.
func TestCellFastPath(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 4))
	var cases []cellCase
	add := func(c cellCase) { cases = append(cases, c) }
	intCol := func(k Kind, qt querypb.Type) Column {
		return Column{Name: "n", Kind: k, field: &querypb.Field{Type: qt}}
	}
	le := func(n uint64, size int) []byte {
		b := make([]byte, 8)
		binary.LittleEndian.PutUint64(b, n)
		return b[:size]
	}
	for _, tc := range []struct {
		typ        byte
		size       int
		sign, uns  Kind
		signedEdge []int64
	}{
		{binlog.TypeTiny, 1, KindInt8, KindUint8, []int64{0, 1, -1, math.MinInt8, math.MaxInt8}},
		{binlog.TypeShort, 2, KindInt16, KindUint16, []int64{0, -1, math.MinInt16, math.MaxInt16}},
		{binlog.TypeInt24, 3, KindInt32, KindUint32, []int64{0, -1, -(1 << 23), 1<<23 - 1}},
		{binlog.TypeLong, 4, KindInt32, KindUint32, []int64{0, -1, math.MinInt32, math.MaxInt32}},
		{binlog.TypeLongLong, 8, KindInt64, KindUint64, []int64{0, -1, math.MinInt64, math.MaxInt64}},
	} {
		vals := tc.signedEdge
		for range 500 {
			vals = append(vals, int64(rng.Uint64()))
		}
		for _, n := range vals {
			add(cellCase{intCol(tc.sign, querypb.Type_INT64), tc.typ, 0, le(uint64(n), tc.size)})
			add(cellCase{intCol(tc.uns, querypb.Type_UINT64), tc.typ, 0, le(uint64(n), tc.size)})
		}
	}
	for _, f := range []float64{0, -0.5, math.MaxFloat64, math.SmallestNonzeroFloat64, 1.0 / 3, -123456.789e200} {
		add(cellCase{Column{Name: "f", Kind: KindFloat64}, binlog.TypeDouble, 0, le(math.Float64bits(f), 8)})
	}
	text := Column{Name: "s", Kind: KindString, field: &querypb.Field{Type: querypb.Type_VARCHAR}}
	for _, s := range []string{"", "name-1", "ü€😀", "\xff\xfe not utf-8"} {
		add(cellCase{text, binlog.TypeVarchar, 160, append([]byte{byte(len(s))}, s...)})
		add(cellCase{text, binlog.TypeVarchar, 1000, append([]byte{byte(len(s)), 0}, s...)})
		add(cellCase{Column{Name: "j", Kind: KindJSON, field: text.field}, binlog.TypeBlob, 4, append(le(uint64(len(s)), 4), s...)})
		add(cellCase{text, binlog.TypeBlob, 2, append(le(uint64(len(s)), 2), s...)})
	}
	for _, ps := range [][2]int{{12, 2}, {18, 0}, {18, 18}, {10, 9}, {9, 0}, {5, 3}, {1, 1}, {17, 8}, {3, 0}} {
		p, s := ps[0], ps[1]
		col := Column{Name: "d", Kind: KindDecimal128, Precision: int32(p), Scale: int32(s), field: &querypb.Field{Type: querypb.Type_DECIMAL}}
		for i := range 300 {
			// Digits of every length up to the precision, the maximum and zero among them.
			var n int64
			switch i {
			case 0:
			case 1:
				n = pow10i(p) - 1
			default:
				n = rng.Int64N(pow10i(1 + rng.IntN(p)))
			}
			if rng.IntN(2) == 0 {
				n = -n
			}
			add(cellCase{col, binlog.TypeNewDecimal, uint16(p<<8 | s), encDecimal(n, p, s)})
		}
	}
	for fsp := range 7 {
		dt := Column{Name: "at", Kind: KindDatetime, field: &querypb.Field{Type: querypb.Type_VARCHAR}}
		ts := Column{Name: "ts", Kind: KindTimestamp, field: &querypb.Field{Type: querypb.Type_VARCHAR}}
		parts := [][6]int{{1000, 1, 1, 0, 0, 0}, {9999, 12, 31, 23, 59, 59}, {1970, 1, 1, 0, 0, 0}, {2024, 2, 29, 12, 0, 0},
			{2024, 2, 31, 1, 2, 3}, {0, 0, 0, 0, 0, 0}, {2026, 0, 4, 1, 1, 1}, {1, 1, 1, 0, 0, 0}}
		for range 300 {
			parts = append(parts, [6]int{1 + rng.IntN(9999), 1 + rng.IntN(12), 1 + rng.IntN(31), rng.IntN(24), rng.IntN(60), rng.IntN(60)})
		}
		for _, pt := range parts {
			frac := rng.IntN(1_000_000)
			add(cellCase{dt, binlog.TypeDateTime2, uint16(fsp), encDatetime2(pt, frac, fsp)})
		}
		for _, sec := range []uint32{0, 1, math.MaxInt32, rng.Uint32()} {
			add(cellCase{ts, binlog.TypeTimestamp2, uint16(fsp), append(binary.BigEndian.AppendUint32(nil, sec), encFrac(rng.IntN(1_000_000), fsp)...)})
		}
	}
	date := Column{Name: "day", Kind: KindDate, field: &querypb.Field{Type: querypb.Type_VARCHAR}}
	for _, ymd := range [][3]int{{1000, 1, 1}, {9999, 12, 31}, {0, 0, 0}, {2024, 0, 1}, {1970, 1, 1}, {1969, 12, 31}, {2023, 2, 30}} {
		u := uint32(ymd[0]<<9 | ymd[1]<<5 | ymd[2])
		add(cellCase{date, binlog.TypeDate, 0, le(uint64(u), 3)})
	}

	mem := memory.NewGoAllocator()
	taken := 0
	for i, c := range cases {
		for _, zeroNull := range []bool{false, true} {
			dt := c.col.Kind.Arrow(c.col)
			fast, slow := array.NewBuilder(mem, dt), array.NewBuilder(mem, dt)
			ok, fastErr := appendCellFast(fast, &c.col, c.typ, c.meta, c.v, zeroNull)
			if !ok {
				t.Fatalf("case %d (%v, type %d, meta %d): the fast path did not take it", i, c.col.Kind, c.typ, c.meta)
			}
			taken++
			val, _, err := binlog.CellValue(c.v, 0, c.typ, c.meta, c.col.field, false)
			if err != nil {
				t.Fatalf("case %d: CellValue: %v", i, err)
			}
			slowErr := appendValue(slow, &c.col, val.Raw(), true, zeroNull)
			if (fastErr != nil) != (slowErr != nil) {
				t.Fatalf("case %d (%v %x, text %q): fast error %v, text path error %v", i, c.col.Kind, c.v, val.Raw(), fastErr, slowErr)
			}
			fa, sa := fast.NewArray(), slow.NewArray()
			if fastErr == nil && !array.Equal(fa, sa) {
				t.Fatalf("case %d (%v, type %d, meta %d, bytes %x, text %q): fast %v, text path %v", i, c.col.Kind, c.typ, c.meta, c.v, val.Raw(), fa, sa)
			}
			fa.Release()
			sa.Release()
		}
	}
	if taken < 10_000 {
		t.Fatalf("only %d cells compared", taken)
	}
}

// TestCellFallback: a type or kind the fast path does not know goes to the text path.
func TestCellFallback(t *testing.T) {
	b := array.NewStringBuilder(memory.NewGoAllocator())
	col := &Column{Name: "e", Kind: KindEnum, Elems: []string{"a", "b"}, field: &querypb.Field{Type: querypb.Type_VARCHAR}}
	if ok, _ := appendCellFast(b, col, binlog.TypeString, uint16(binlog.TypeEnum)<<8|1, []byte{2}, false); ok {
		t.Fatal("the fast path took an ENUM")
	}
	if err := appendCell(b, col, binlog.TypeString, uint16(binlog.TypeEnum)<<8|1, []byte{2}, false); err != nil {
		t.Fatal(err)
	}
	if got := b.NewStringArray().Value(0); got != "b" {
		t.Fatalf("got %q, want b", got)
	}
	wide := &Column{Name: "d", Kind: KindDecimal128, Precision: 30, Scale: 2, field: &querypb.Field{Type: querypb.Type_DECIMAL}}
	if ok, _ := appendCellFast(array.NewBuilder(memory.NewGoAllocator(), &arrow.Decimal128Type{Precision: 30, Scale: 2}), wide, binlog.TypeNewDecimal, 30<<8|2, encDecimal(12345, 18, 2), false); ok {
		t.Fatal("the fast path took a 30-digit decimal")
	}
}

func pow10i(n int) int64 {
	r := int64(1)
	for range n {
		r *= 10
	}
	return r
}

// encDecimal writes unscaled n as MySQL's binary DECIMAL(p,s).
func encDecimal(n int64, p, s int) []byte {
	neg := n < 0
	if neg {
		n = -n
	}
	intg := p - s
	ip, fp := n/pow10i(s), n%pow10i(s)
	var out []byte
	put := func(v int64, nb int) {
		for i := nb - 1; i >= 0; i-- {
			out = append(out, byte(v>>(8*i)))
		}
	}
	// Integer part: the leftover digits first, then groups of nine.
	intg0, intgx := intg/9, intg%9
	put(ip/pow10i(9*intg0), digBytes[intgx])
	for g := intg0 - 1; g >= 0; g-- {
		put(ip/pow10i(9*g)%1_000_000_000, 4)
	}
	frac0, fracx := s/9, s%9
	for g := range frac0 {
		put(fp/pow10i(s-9*(g+1))%1_000_000_000, 4)
	}
	put(fp%pow10i(fracx), digBytes[fracx])
	out[0] ^= 0x80
	if neg {
		for i := range out {
			out[i] ^= 0xff
		}
	}
	return out
}

// encDatetime2 writes y-mo-d h:mi:s.frac as MySQL's DATETIME(fsp).
func encDatetime2(pt [6]int, frac, fsp int) []byte {
	ymd := uint64((pt[0]*13+pt[1])<<5 | pt[2])
	hms := uint64(pt[3]<<12 | pt[4]<<6 | pt[5])
	packed := (ymd<<17 | hms) + 0x8000000000
	out := []byte{byte(packed >> 32), byte(packed >> 24), byte(packed >> 16), byte(packed >> 8), byte(packed)}
	return append(out, encFrac(frac, fsp)...)
}

// encFrac writes a fraction of microseconds as DATETIME2/TIMESTAMP2 store it for fsp (big-endian: 1 byte of
// hundredths, 2 of 1/10000 s, 3 of microseconds), truncated to fsp digits as the server stores it.
func encFrac(us, fsp int) []byte {
	switch fsp {
	case 1, 2:
		v := us / 10_000
		if fsp == 1 {
			v = v / 10 * 10
		}
		return []byte{byte(v)}
	case 3, 4:
		v := us / 100
		if fsp == 3 {
			v = v / 10 * 10
		}
		return []byte{byte(v >> 8), byte(v)}
	case 5, 6:
		v := us
		if fsp == 5 {
			v = v / 10 * 10
		}
		return []byte{byte(v >> 16), byte(v >> 8), byte(v)}
	}
	return nil
}

// TestCivilText: the snapshot's direct datetime reader gives parseDateTime's value for every form the
// server writes, and leaves everything else to it.
func TestCivilText(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 9))
	in := []string{"1970-01-01", "1969-12-31 23:59:59.999999", "0000-00-00 00:00:00", "2024-00-10", "9999-12-31 23:59:59.9",
		"1000-01-01 00:00:00.000001", "2023-02-31 10:00:00.12", "0001-01-01", "2026-12-04 01:40:05.123456", "2026-12-04 1:40:05",
		"2026-12-04T01:40:05", "2026-12-04 01:40:05.", "2026-12-04 01:40:05.1234567", "x026-12-04", "2026-12-04 01:40:0x"}
	for range 2000 {
		s := fmt.Sprintf("%04d-%02d-%02d", rng.IntN(10000), rng.IntN(13), rng.IntN(32))
		if rng.IntN(4) > 0 {
			s += fmt.Sprintf(" %02d:%02d:%02d", rng.IntN(24), rng.IntN(60), rng.IntN(60))
			if n := rng.IntN(7); n > 0 {
				s += "." + fmt.Sprintf("%06d", rng.IntN(1_000_000))[:n]
			}
		}
		in = append(in, s)
	}
	fast := 0
	for _, s := range in {
		days, us, ok := civilText([]byte(s))
		tm, zero, err := parseDateTime(s)
		switch {
		case !ok:
			continue
		case zero:
			if us >= 0 {
				t.Errorf("%q: zero for parseDateTime, days %d us %d here", s, days, us)
			}
		case err != nil:
			t.Errorf("%q: parseDateTime refuses it (%v), read here as %d %d", s, err, days, us)
		case days*86_400_000_000+us != tm.UnixMicro():
			t.Errorf("%q: %d µs here, %d by parseDateTime", s, days*86_400_000_000+us, tm.UnixMicro())
		}
		fast++
	}
	if fast < 1500 {
		t.Fatalf("only %d of %d forms read directly", fast, len(in))
	}
}

// TestShortInt: the snapshot's integer reader agrees with strconv on what it takes, and leaves what could
// overflow, or is not plain digits, to it.
func TestShortInt(t *testing.T) {
	for _, in := range []string{"0", "-0", "7", "-1", "007", "999999999999999999", "-999999999999999999", "-9223372036854775808",
		"18446744073709551615", "+5", "-", "", "1 ", "12a", "--1", "1-"} {
		n, ok := shortInt([]byte(in))
		want, err := strconv.ParseInt(in, 10, 64)
		if ok && (err != nil || n != want) {
			t.Errorf("%q: %d here, strconv %d, %v", in, n, want, err)
		}
		if !ok && len(strings.TrimLeft(in, "-")) <= 18 && err == nil && !strings.HasPrefix(in, "+") {
			t.Errorf("%q: left to strconv, which reads it as %d", in, want)
		}
	}
}
