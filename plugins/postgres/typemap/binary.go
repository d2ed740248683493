package typemap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"

	"github.com/skippr-dev/skippr/plugin-sdk/civil"
	"github.com/skippr-dev/skippr/plugin-sdk/values"
)

// The snapshot reads most columns in PostgreSQL's binary form: the server's send functions and this package's
// decoders cost a fraction of the text output functions and parsers (a timestamptz or numeric is rendered and
// parsed back digit by digit in text). pgoutput only speaks text, so the stream keeps the text decoders;
// TestBinaryMatchesText holds the two to the same Arrow values, type by type.

// Text-like base types whose binary form is their text in the client encoding.
const (
	oidName    = 19
	oidText    = 25
	oidJSON    = 114
	oidBpchar  = 1042
	oidVarchar = 1043
	oidJSONB   = 3802
)

// Microseconds and days between PostgreSQL's epoch (2000-01-01) and Unix's.
const (
	pgEpochDays   = 10957
	pgEpochMicros = pgEpochDays * 86400e6
)

// Binary says whether a value of t is read in binary form. Lists, enums, unconstrained numerics and every type
// that falls back to its text form stay in text: their binary forms are not what the text decoders produce.
func Binary(t *Type) bool {
	switch t.Kind {
	case KindList:
		return false
	case KindString:
		switch t.OID {
		case oidText, oidVarchar, oidBpchar, oidName, oidJSON, oidJSONB:
			return true
		}
		return false
	}
	return true
}

// Decoder returns a function that appends one non-NULL value of t to b, which must be a builder of t.Arrow():
// binary form when inBinary is true (only where Binary(t)), text form otherwise. Binding the builder once saves
// the type switches of Append on every value of a snapshot.
func Decoder(t *Type, b array.Builder, inBinary bool) func([]byte) error {
	if !inBinary {
		return func(v []byte) error { return Append(t, b, v) }
	}
	switch t.Kind {
	case KindString:
		sb := b.(*array.StringBuilder)
		jsonb := t.OID == oidJSONB
		return func(v []byte) error {
			if jsonb {
				if len(v) == 0 || v[0] != 1 {
					return errors.New("jsonb: unknown binary format version")
				}
				v = v[1:]
			}
			if !utf8.Valid(v) {
				return fmt.Errorf("%s value is not valid UTF-8", t.Name)
			}
			sb.BinaryBuilder.Append(v)
			return nil
		}
	case KindBool:
		bb := b.(*array.BooleanBuilder)
		return func(v []byte) error {
			if len(v) != 1 {
				return sizeErr(t, v, 1)
			}
			bb.Append(v[0] != 0)
			return nil
		}
	case KindInt16:
		ib := b.(*array.Int16Builder)
		return func(v []byte) error {
			if len(v) != 2 {
				return sizeErr(t, v, 2)
			}
			ib.Append(int16(binary.BigEndian.Uint16(v)))
			return nil
		}
	case KindInt32:
		ib := b.(*array.Int32Builder)
		return func(v []byte) error {
			if len(v) != 4 {
				return sizeErr(t, v, 4)
			}
			ib.Append(int32(binary.BigEndian.Uint32(v)))
			return nil
		}
	case KindInt64:
		ib := b.(*array.Int64Builder)
		if t.OID == oidOID { // unsigned 32 bits on the wire
			return func(v []byte) error {
				if len(v) != 4 {
					return sizeErr(t, v, 4)
				}
				ib.Append(int64(binary.BigEndian.Uint32(v)))
				return nil
			}
		}
		return func(v []byte) error {
			if len(v) != 8 {
				return sizeErr(t, v, 8)
			}
			ib.Append(int64(binary.BigEndian.Uint64(v)))
			return nil
		}
	case KindFloat32:
		fb := b.(*array.Float32Builder)
		return func(v []byte) error {
			if len(v) != 4 {
				return sizeErr(t, v, 4)
			}
			fb.Append(math.Float32frombits(binary.BigEndian.Uint32(v)))
			return nil
		}
	case KindFloat64:
		fb := b.(*array.Float64Builder)
		return func(v []byte) error {
			if len(v) != 8 {
				return sizeErr(t, v, 8)
			}
			fb.Append(math.Float64frombits(binary.BigEndian.Uint64(v)))
			return nil
		}
	case KindDecimal:
		db := b.(*array.Decimal128Builder)
		return func(v []byte) error {
			n, err := NumericBinary(v, t.Precision, t.Scale)
			if err != nil {
				return err
			}
			db.Append(n)
			return nil
		}
	case KindBytes:
		bb := b.(*array.BinaryBuilder)
		return func(v []byte) error { bb.Append(v); return nil }
	case KindUUID:
		fb := b.(*array.FixedSizeBinaryBuilder)
		return func(v []byte) error {
			if len(v) != 16 {
				return sizeErr(t, v, 16)
			}
			fb.Append(v)
			return nil
		}
	case KindDate:
		db := b.(*array.Date32Builder)
		return func(v []byte) error {
			if len(v) != 4 {
				return sizeErr(t, v, 4)
			}
			d := int32(binary.BigEndian.Uint32(v))
			switch d {
			case math.MaxInt32: // infinity and -infinity are the extremes of the binary form
				db.Append(values.DateInfinity)
				return nil
			case math.MinInt32:
				db.Append(values.DateNegInfinity)
				return nil
			}
			// Cannot overflow: PostgreSQL's last date is 2 145 031 948 days after 2000.
			db.Append(arrow.Date32(d + pgEpochDays))
			return nil
		}
	case KindTime:
		tb := b.(*array.Time64Builder)
		return func(v []byte) error {
			if len(v) != 8 {
				return sizeErr(t, v, 8)
			}
			tb.Append(arrow.Time64(binary.BigEndian.Uint64(v)))
			return nil
		}
	case KindTimestamp, KindTimestampTZ:
		tb := b.(*array.TimestampBuilder)
		return func(v []byte) error {
			if len(v) != 8 {
				return sizeErr(t, v, 8)
			}
			us, err := timestampBinary(int64(binary.BigEndian.Uint64(v)), t.Kind == KindTimestampTZ)
			if err != nil {
				return err
			}
			tb.Append(arrow.Timestamp(us))
			return nil
		}
	case KindInterval:
		ib := b.(*array.MonthDayNanoIntervalBuilder)
		return func(v []byte) error {
			if len(v) != 16 {
				return sizeErr(t, v, 16)
			}
			us := int64(binary.BigEndian.Uint64(v))
			if us > math.MaxInt64/1000 || us < math.MinInt64/1000 {
				return fmt.Errorf("interval of %d microseconds is outside month_day_nano_interval's range", us)
			}
			ib.Append(arrow.MonthDayNanoInterval{
				Days:        int32(binary.BigEndian.Uint32(v[8:])),
				Months:      int32(binary.BigEndian.Uint32(v[12:])),
				Nanoseconds: us * 1000,
			})
			return nil
		}
	}
	return func([]byte) error { return fmt.Errorf("type %s (kind %d) has no binary decoder", t.Name, t.Kind) }
}

func sizeErr(t *Type, v []byte, want int) error {
	return fmt.Errorf("%s: binary value of %d bytes, want %d", t.Name, len(v), want)
}

// timestampBinary converts microseconds since 2000 to microseconds since 1970, ±infinity to the values that
// carry it (plugin-sdk/values). Instants from values.TimestampInfinity on are Unrepresentable, as in
// ParseTimestamp.
func timestampBinary(us int64, tz bool) (int64, error) {
	switch us {
	case math.MaxInt64:
		return int64(values.TimestampInfinity), nil
	case math.MinInt64:
		return int64(values.TimestampNegInfinity), nil
	}
	if us >= math.MaxInt64-pgEpochMicros {
		// Name the value as PostgreSQL would print it (UTC): days and the rest cannot overflow.
		days := floorDiv(us, 86400e6)
		text := AppendTimestamp(nil, arrow.Timestamp(us-days*86400e6), arrow.Microsecond, tz)
		y, m, d := civil.Date(days + pgEpochDays)
		date, _ := appendYear(nil, y)
		return 0, outOfRange(fmt.Sprintf("%s-%02d-%02d %s", date, m, d, text[len("1970-01-01 "):]))
	}
	return us + pgEpochMicros, nil
}

// Sign words of numeric's binary form (numeric.c).
const (
	numericPos  = 0x0000
	numericNeg  = 0x4000
	numericNaN  = 0xC000
	numericPInf = 0xD000
	numericNInf = 0xF000
)

// pow10 are the powers of ten a decimal128 can scale by.
var pow10 = func() [39]decimal128.Num {
	var p [39]decimal128.Num
	p[0] = decimal128.FromU64(1)
	for i := 1; i < len(p); i++ {
		p[i] = p[i-1].Mul(decimal128.FromU64(10))
	}
	return p
}()

// upow10 are the powers of ten a uint64 holds.
var upow10 = func() [20]uint64 {
	var p [20]uint64
	p[0] = 1
	for i := 1; i < len(p); i++ {
		p[i] = p[i-1] * 10
	}
	return p
}()

// NumericBinary decodes numeric's binary form (ndigits, weight, sign, dscale, then base-10000 digits, the first
// of weight 10000^weight) into a decimal of the column's precision and scale, exactly.
func NumericBinary(v []byte, precision, scale int32) (decimal128.Num, error) {
	if len(v) < 8 {
		return decimal128.Num{}, fmt.Errorf("numeric: binary value of %d bytes is too short", len(v))
	}
	ndigits := int(binary.BigEndian.Uint16(v))
	weight := int(int16(binary.BigEndian.Uint16(v[2:])))
	sign := binary.BigEndian.Uint16(v[4:])
	if len(v) != 8+2*ndigits {
		return decimal128.Num{}, fmt.Errorf("numeric: binary value of %d bytes holds %d digits", len(v), ndigits)
	}
	switch sign {
	case numericPos, numericNeg:
	case numericNaN, numericPInf, numericNInf:
		name := map[uint16]string{numericNaN: "NaN", numericPInf: "Infinity", numericNInf: "-Infinity"}[sign]
		return decimal128.Num{}, numericSpecial(name, precision, scale)
	default:
		return decimal128.Num{}, fmt.Errorf("numeric: unknown sign word %#x", sign)
	}
	digit := func(i int) uint64 { return uint64(binary.BigEndian.Uint16(v[8+2*i:])) }
	// value = digits as an integer / 10^frac. Zero groups at the end add nothing.
	frac := 4 * (ndigits - 1 - weight)
	for ndigits > 0 && digit(ndigits-1) == 0 {
		ndigits--
		frac -= 4
	}
	if ndigits == 0 {
		return decimal128.Num{}, nil
	}
	// Digits past the scale can only be the trailing zeros of the last group: PostgreSQL rounds a value to its
	// column's scale. Dropping them there keeps the integer within 38 digits.
	lastDiv, lastDigits := uint64(1), 4
	if excess := frac - int(scale); excess > 0 {
		if excess >= 4 {
			return decimal128.Num{}, fmt.Errorf("numeric has more than %d decimal places", scale)
		}
		lastDiv, lastDigits, frac = upow10[excess], 4-excess, int(scale)
	}
	var n decimal128.Num
	var small uint64 // while it fits, uint64 arithmetic: decimal128's is many times dearer
	big := false
	for i := 0; i < ndigits; i++ {
		d, k := digit(i), 4
		if d > 9999 {
			return decimal128.Num{}, fmt.Errorf("numeric: digit %d is not base 10000", d)
		}
		if i == ndigits-1 {
			if d%lastDiv != 0 {
				return decimal128.Num{}, fmt.Errorf("numeric has more than %d decimal places", scale)
			}
			d, k = d/lastDiv, lastDigits
		}
		if !big && small <= (math.MaxUint64-9999)/10000 {
			small = small*upow10[k] + d
			continue
		}
		if !big {
			n, big = decimal128.FromU64(small), true
		}
		if n.Greater(pow10[38-k]) { // n·10^k would pass 38 digits
			return decimal128.Num{}, fmt.Errorf("numeric does not fit decimal128(%d,%d)", precision, scale)
		}
		n = n.Mul(pow10[k]).Add(decimal128.FromU64(d))
	}
	if !big {
		n = decimal128.FromU64(small)
	}
	if shift := int(scale) - frac; shift > 0 {
		if shift > 38 || n.Greater(pow10[38-shift]) {
			return decimal128.Num{}, fmt.Errorf("numeric does not fit decimal128(%d,%d)", precision, scale)
		}
		n = n.Mul(pow10[shift])
	}
	if !n.Less(pow10[precision]) {
		return decimal128.Num{}, fmt.Errorf("numeric does not fit decimal128(%d,%d)", precision, scale)
	}
	if sign == numericNeg {
		n = n.Negate()
	}
	return n, nil
}
