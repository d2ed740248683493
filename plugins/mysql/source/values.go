package source

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/decimal256"

	"github.com/skippr-dev/skippr/plugin-sdk/civil"
)

// Kind says how a column's value is represented in Arrow. The snapshot (text protocol) and the binary log
// (vitess's cell decoder) both hand over a value's text form; appendValue turns either into the same Arrow
// value, so a row reads the same whichever way it came (TestSnapshotMatchesBinlog).
type Kind int

const (
	KindInt8       Kind = iota + 1 // tinyint: int8
	KindInt16                      // smallint: int16
	KindInt32                      // mediumint, int: int32
	KindInt64                      // bigint: int64
	KindUint8                      // tinyint unsigned: uint8
	KindUint16                     // smallint unsigned: uint16
	KindUint32                     // mediumint, int unsigned: uint32
	KindUint64                     // bigint unsigned: uint64 (never wraps above 2^63)
	KindFloat32                    // float: float32
	KindFloat64                    // double: float64
	KindDecimal128                 // decimal(p,s), p <= 38: decimal128(p,s)
	KindDecimal256                 // decimal(p,s), p > 38 (up to 65): decimal256(p,s)
	KindBit                        // bit(n): uint64, the bits as a big-endian number
	KindDate                       // date: date32
	KindDatetime                   // datetime(p): timestamp[us] without time zone (wall-clock, as stored)
	KindTimestamp                  // timestamp(p): timestamp[us, UTC]
	KindTime                       // time(p): duration[us] (-838:59:59 to 838:59:59, beyond a day)
	KindYear                       // year: int16 (0 for 0000)
	KindString                     // char, varchar, text (utf8mb4, utf8mb3, ascii): utf8
	KindBinary                     // binary, varbinary, blob: binary
	KindEnum                       // enum: utf8, the member's name
	KindSet                        // set: utf8, the members comma-separated in definition order
	KindJSON                       // json (MySQL) and MariaDB's LONGTEXT json alias: utf8, the JSON text
)

// Arrow is the kind's Arrow type for col.
func (k Kind) Arrow(col Column) arrow.DataType {
	switch k {
	case KindInt8:
		return arrow.PrimitiveTypes.Int8
	case KindInt16, KindYear:
		return arrow.PrimitiveTypes.Int16
	case KindInt32:
		return arrow.PrimitiveTypes.Int32
	case KindInt64:
		return arrow.PrimitiveTypes.Int64
	case KindUint8:
		return arrow.PrimitiveTypes.Uint8
	case KindUint16:
		return arrow.PrimitiveTypes.Uint16
	case KindUint32:
		return arrow.PrimitiveTypes.Uint32
	case KindUint64, KindBit:
		return arrow.PrimitiveTypes.Uint64
	case KindFloat32:
		return arrow.PrimitiveTypes.Float32
	case KindFloat64:
		return arrow.PrimitiveTypes.Float64
	case KindDecimal128:
		return &arrow.Decimal128Type{Precision: col.Precision, Scale: col.Scale}
	case KindDecimal256:
		return &arrow.Decimal256Type{Precision: col.Precision, Scale: col.Scale}
	case KindDate:
		return arrow.FixedWidthTypes.Date32
	case KindDatetime:
		return &arrow.TimestampType{Unit: arrow.Microsecond}
	case KindTimestamp:
		return &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}
	case KindTime:
		return arrow.FixedWidthTypes.Duration_us
	case KindBinary:
		return arrow.BinaryTypes.Binary
	}
	return arrow.BinaryTypes.String
}

// valueError is a value the pipeline cannot carry under its settings.
type valueError struct{ msg string }

func (e *valueError) Error() string { return e.msg }

// appendValue appends one non-null value's text form v to b. fromBinlog says v came from the binary log,
// where ENUM is the member's number and SET a bitmap. zeroNull turns zero dates into nulls instead of errors.
//
// It runs for every cell of the stream that the binary decoder leaves to it; the snapshot's rowBatch reads
// the common kinds with the same functions (intValue, uintValue, floatValue, decimal128Value, civilValue)
// and takes the rest here. It does not copy v into a string where a parse can read the bytes (strconv does
// not keep its argument, so string(v) there does not allocate).
func appendValue(b array.Builder, col *Column, v []byte, fromBinlog, zeroNull bool) error {
	bad := func(err error) error { return badValue(col, v, err) }
	switch col.Kind {
	case KindInt8, KindInt16, KindInt32, KindInt64, KindYear:
		n, err := intValue(col, v)
		if err != nil {
			return err
		}
		switch bb := b.(type) {
		case *array.Int8Builder:
			bb.Append(int8(n))
		case *array.Int16Builder:
			bb.Append(int16(n))
		case *array.Int32Builder:
			bb.Append(int32(n))
		case *array.Int64Builder:
			bb.Append(n)
		}
	case KindUint8, KindUint16, KindUint32, KindUint64:
		n, err := uintValue(col, v)
		if err != nil {
			return err
		}
		switch bb := b.(type) {
		case *array.Uint8Builder:
			bb.Append(uint8(n))
		case *array.Uint16Builder:
			bb.Append(uint16(n))
		case *array.Uint32Builder:
			bb.Append(uint32(n))
		case *array.Uint64Builder:
			bb.Append(n)
		}
	case KindFloat32:
		f, err := floatValue(col, v, 32)
		if err != nil {
			return err
		}
		b.(*array.Float32Builder).Append(float32(f))
	case KindFloat64:
		f, err := floatValue(col, v, 64)
		if err != nil {
			return err
		}
		b.(*array.Float64Builder).Append(f)
	case KindDecimal128:
		d, err := decimal128Value(col, v)
		if err != nil {
			return err
		}
		b.(*array.Decimal128Builder).Append(d)
	case KindDecimal256:
		d, err := decimal256.FromString(string(v), col.Precision, col.Scale)
		if err != nil {
			return bad(err)
		}
		b.(*array.Decimal256Builder).Append(d)
	case KindBit:
		if len(v) > 8 {
			return bad(fmt.Errorf("%d bytes for a bit column", len(v)))
		}
		var buf [8]byte
		copy(buf[8-len(v):], v)
		b.(*array.Uint64Builder).Append(binary.BigEndian.Uint64(buf[:]))
	case KindDate, KindDatetime, KindTimestamp:
		n, null, err := civilValue(col, v, zeroNull)
		switch {
		case err != nil:
			return err
		case null:
			b.AppendNull()
		case col.Kind == KindDate:
			b.(*array.Date32Builder).Append(arrow.Date32(n))
		default:
			b.(*array.TimestampBuilder).Append(arrow.Timestamp(n))
		}
	case KindTime:
		d, err := parseTime(string(v))
		if err != nil {
			return bad(err)
		}
		b.(*array.DurationBuilder).Append(arrow.Duration(d))
	case KindEnum:
		s := string(v)
		if fromBinlog {
			n, err := strconv.Atoi(s)
			if err != nil {
				return bad(err)
			}
			// 0 is the empty string MySQL stores for an invalid member in non-strict mode.
			s = ""
			if n > 0 && n <= len(col.Elems) {
				s = col.Elems[n-1]
			}
		}
		b.(*array.StringBuilder).Append(s)
	case KindSet:
		s := string(v)
		if fromBinlog {
			var bits uint64
			for i := len(v) - 1; i >= 0; i-- {
				bits = bits<<8 | uint64(v[i])
			}
			var members []string
			for i, e := range col.Elems {
				if bits&(1<<uint(i)) != 0 {
					members = append(members, e)
				}
			}
			s = strings.Join(members, ",")
		}
		b.(*array.StringBuilder).Append(s)
	case KindString, KindJSON:
		if !validUTF8(v) {
			return notUTF8(col, v)
		}
		b.(*array.StringBuilder).BinaryBuilder.Append(v)
	case KindBinary:
		if fromBinlog && len(v) < col.Width {
			v = append(append(make([]byte, 0, col.Width), v...), make([]byte, col.Width-len(v))...)
		}
		b.(*array.BinaryBuilder).Append(v)
	default:
		return bad(fmt.Errorf("unknown kind %d", col.Kind))
	}
	return nil
}

// notUTF8 is the refusal of a text value that is not UTF-8.
func notUTF8(col *Column, v []byte) error {
	if col.Hidden {
		return &valueError{fmt.Sprintf("column %s holds bytes that are not UTF-8 (not shown: the column is excluded or hashed)", col.Name)}
	}
	return &valueError{fmt.Sprintf("column %s holds bytes that are not UTF-8: %q", col.Name, v)}
}

// badValue is the error of a value that does not parse as its column's kind.
func badValue(col *Column, v []byte, err error) error {
	if col.Hidden {
		// err may quote the value too.
		return fmt.Errorf("column %s: a value that does not parse as %s (not shown: the column is excluded or hashed)", col.Name, col.DataType)
	}
	return fmt.Errorf("column %s: value %q: %w", col.Name, v, err)
}

// intValue reads a signed integer column's value (tinyint to bigint, year).
func intValue(col *Column, v []byte) (int64, error) {
	if n, ok := shortInt(v); ok {
		return n, nil
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		return 0, badValue(col, v, err)
	}
	return n, nil
}

// uintValue reads an unsigned integer column's value.
func uintValue(col *Column, v []byte) (uint64, error) {
	if n, ok := shortInt(v); ok && n >= 0 {
		return uint64(n), nil
	}
	n, err := strconv.ParseUint(string(v), 10, 64)
	if err != nil {
		return 0, badValue(col, v, err)
	}
	return n, nil
}

// floatValue reads a float (bits 32) or double (64) column's value.
func floatValue(col *Column, v []byte, bits int) (float64, error) {
	f, err := strconv.ParseFloat(string(v), bits)
	if err != nil {
		return 0, badValue(col, v, err)
	}
	return f, nil
}

// decimal128Value reads a decimal column's value of precision up to 38.
func decimal128Value(col *Column, v []byte) (decimal128.Num, error) {
	if n, ok := smallDecimal(v, col.Scale); ok {
		return decimal128.FromI64(n), nil
	}
	d, err := decimal128.FromString(string(v), col.Precision, col.Scale)
	if err != nil {
		return d, badValue(col, v, err)
	}
	return d, nil
}

// civilValue reads a date (as days since the epoch) or a datetime or timestamp (as microseconds since the
// epoch, the wall clock read as UTC). A zero date is null when zeroNull is set, else refused.
func civilValue(col *Column, v []byte, zeroNull bool) (n int64, null bool, err error) {
	if days, us, ok := civilText(v); ok && us >= 0 {
		if col.Kind == KindDate {
			return days, false, nil
		}
		return days*86_400_000_000 + us, false, nil
	}
	t, zero, err := parseDateTime(string(v))
	if err != nil {
		return 0, false, badValue(col, v, err)
	}
	if zero {
		if zeroNull {
			return 0, true, nil
		}
		return 0, false, &valueError{fmt.Sprintf("column %s holds the zero date %q, which no destination type can hold (set zero_date: null to carry it as null)", col.Name, v)}
	}
	if col.Kind == KindDate {
		return t.Unix() / 86400, false, nil
	}
	return t.UnixMicro(), false, nil
}

// validUTF8 is utf8.Valid with a faster way through ASCII, which most text is: eight bytes at a time (the
// last eight overlapping), where utf8.Valid goes byte by byte through short values. Half the time on the
// bench table's two text columns. The snapshot, appendValue and the stream's appendText check with it.
func validUTF8(v []byte) bool {
	const high = 0x8080808080808080
	n := len(v)
	if n < 8 {
		for _, c := range v {
			if c >= utf8.RuneSelf {
				return utf8.Valid(v)
			}
		}
		return true
	}
	for i := 0; i+8 <= n; i += 8 {
		if binary.LittleEndian.Uint64(v[i:])&high != 0 {
			return utf8.Valid(v)
		}
	}
	if binary.LittleEndian.Uint64(v[n-8:])&high != 0 {
		return utf8.Valid(v)
	}
	return true
}

// shortInt reads a decimal integer of 1 to 18 digits, optionally negative, which cannot overflow; ok is false
// for anything else, which then takes strconv (the snapshot reads every integer cell as text).
func shortInt(v []byte) (n int64, ok bool) {
	neg := len(v) > 1 && v[0] == '-'
	if neg {
		v = v[1:]
	}
	if len(v) == 0 || len(v) > 18 {
		return 0, false
	}
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}

// civilText reads the forms the server writes, "YYYY-MM-DD", "YYYY-MM-DD HH:MM:SS" and that with a fraction
// of 1 to 6 digits, as days since the epoch and microseconds into the day, without parseDateTime's string
// and time.Time (the snapshot reads a datetime per row). A zero date is days 0 and us -1. ok is false for
// any other form, which then takes parseDateTime; both give the same value (TestCivilText). The fields sit
// at fixed places, so each is read where it is (a loop per field was 9% of the snapshot's plugin CPU).
func civilText(v []byte) (days, us int64, ok bool) {
	n := len(v)
	if n != 10 && (n < 19 || n == 20 || n > 26) || v[4] != '-' || v[7] != '-' {
		return 0, 0, false
	}
	hi, ok1 := digits2(v[0], v[1])
	lo, ok2 := digits2(v[2], v[3])
	mo, ok3 := digits2(v[5], v[6])
	d, ok4 := digits2(v[8], v[9])
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return 0, 0, false
	}
	y := hi*100 + lo
	if y == 0 || mo == 0 || d == 0 {
		return 0, -1, true
	}
	if n > 10 {
		if v[10] != ' ' || v[13] != ':' || v[16] != ':' {
			return 0, 0, false
		}
		h, ok1 := digits2(v[11], v[12])
		mi, ok2 := digits2(v[14], v[15])
		sec, ok3 := digits2(v[17], v[18])
		if !ok1 || !ok2 || !ok3 {
			return 0, 0, false
		}
		us = ((h*60+mi)*60 + sec) * 1_000_000
		if n > 19 {
			if v[19] != '.' {
				return 0, 0, false
			}
			if n == 26 { // datetime(6), the usual precision: three pairs
				f1, ok1 := digits2(v[20], v[21])
				f2, ok2 := digits2(v[22], v[23])
				f3, ok3 := digits2(v[24], v[25])
				if !ok1 || !ok2 || !ok3 {
					return 0, 0, false
				}
				return civil.Days(y, mo, d), us + f1*10_000 + f2*100 + f3, true
			}
			var f int64
			for _, c := range v[20:] {
				c -= '0' // a byte below '0' wraps around above 9
				if c > 9 {
					return 0, 0, false
				}
				f = f*10 + int64(c)
			}
			us += f * pow10[26-n]
		}
	}
	return civil.Days(y, mo, d), us, true
}

// digits2 reads two decimal digits.
func digits2(a, b byte) (int64, bool) {
	a, b = a-'0', b-'0' // a byte below '0' wraps around above 9
	return int64(a)*10 + int64(b), a <= 9 && b <= 9
}

// smallDecimal reads a decimal's text form with exactly scale fraction digits ("-123.45" for scale 2, as
// the server writes it) of at most 18 digits in all as the unscaled integer, without the big-number parse
// decimal128.FromString makes; ok is false for anything else, which then takes that parse.
func smallDecimal(v []byte, scale int32) (n int64, ok bool) {
	neg := len(v) > 0 && v[0] == '-'
	if neg {
		v = v[1:]
	}
	digits, frac, dot := 0, 0, false
	for _, c := range v {
		switch {
		case c >= '0' && c <= '9':
			n = n*10 + int64(c-'0')
			digits++
			if dot {
				frac++
			}
		case c == '.' && !dot:
			dot = true
		default:
			return 0, false
		}
		if digits > 18 {
			return 0, false
		}
	}
	if digits == 0 || int32(frac) != scale {
		return 0, false
	}
	if neg {
		n = -n
	}
	return n, true
}

// parseDateTime reads "YYYY-MM-DD[ HH:MM:SS[.ffffff]]" as UTC. zero is set for a date with a zero year,
// month or day part (0000-00-00, 2024-00-10), which MySQL accepts outside strict mode and Go cannot hold.
func parseDateTime(s string) (t time.Time, zero bool, err error) {
	if len(s) < 10 || s[4] != '-' || s[7] != '-' {
		return t, false, fmt.Errorf("not a date")
	}
	y, e1 := strconv.Atoi(s[0:4])
	mo, e2 := strconv.Atoi(s[5:7])
	d, e3 := strconv.Atoi(s[8:10])
	if e1 != nil || e2 != nil || e3 != nil {
		return t, false, fmt.Errorf("not a date")
	}
	if y == 0 || mo == 0 || d == 0 {
		return t, true, nil
	}
	var h, mi, sec, us int
	if rest := s[10:]; rest != "" {
		if len(rest) < 9 || rest[0] != ' ' || rest[3] != ':' || rest[6] != ':' {
			return t, false, fmt.Errorf("not a date and time")
		}
		h, e1 = strconv.Atoi(rest[1:3])
		mi, e2 = strconv.Atoi(rest[4:6])
		sec, e3 = strconv.Atoi(rest[7:9])
		if e1 != nil || e2 != nil || e3 != nil {
			return t, false, fmt.Errorf("not a date and time")
		}
		if frac := rest[9:]; frac != "" {
			if us, err = micros(frac); err != nil {
				return t, false, err
			}
		}
	}
	return time.Date(y, time.Month(mo), d, h, mi, sec, us*1000, time.UTC), false, nil
}

// micros reads a fraction ".f" to ".ffffff" as microseconds.
func micros(frac string) (int, error) {
	if frac[0] != '.' || len(frac) > 7 || len(frac) < 2 {
		return 0, fmt.Errorf("bad fraction %q", frac)
	}
	n, err := strconv.Atoi(frac[1:])
	if err != nil {
		return 0, fmt.Errorf("bad fraction %q", frac)
	}
	for i := len(frac) - 1; i < 6; i++ {
		n *= 10
	}
	return n, nil
}

// parseTime reads "[-]H..H:MM:SS[.ffffff]" (hours up to 838) as microseconds.
func parseTime(s string) (int64, error) {
	neg := strings.HasPrefix(s, "-")
	rest := strings.TrimPrefix(s, "-")
	parts := strings.Split(rest, ":")
	if len(parts) != 3 {
		return 0, fmt.Errorf("not a time")
	}
	h, e1 := strconv.Atoi(parts[0])
	m, e2 := strconv.Atoi(parts[1])
	secPart, frac, _ := strings.Cut(parts[2], ".")
	sec, e3 := strconv.Atoi(secPart)
	if e1 != nil || e2 != nil || e3 != nil {
		return 0, fmt.Errorf("not a time")
	}
	us := 0
	if frac != "" {
		var err error
		if us, err = micros("." + frac); err != nil {
			return 0, err
		}
	}
	d := ((int64(h)*60+int64(m))*60+int64(sec))*1_000_000 + int64(us)
	if neg {
		d = -d
	}
	return d, nil
}
