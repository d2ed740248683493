package source

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"vitess.io/vitess/go/mysql/binlog"

	"github.com/skippr-dev/skippr/plugin-sdk/civil"
)

// cell is one column of a binlog row image: its bytes in the event, undecoded (nil when null).
type cell struct {
	b    []byte
	null bool
}

// appendCell appends a non-null binlog cell of col (binlog type typ with its table-map metadata) to b.
//
// The common types are decoded from their binary form straight into the builder. vitess's
// binlog.CellValue, which the rest take, renders every value as text (through fmt for dates and decimals)
// that appendValue then parses back: on the benchmark's six columns that round trip was half of the
// plugin's CPU per streamed row. Both ways give the same Arrow value (TestCellFastPath compares them on
// every type and edge value the fast path takes).
func appendCell(b array.Builder, col *Column, typ byte, meta uint16, v []byte, zeroNull bool) error {
	if ok, err := appendCellFast(b, col, typ, meta, v, zeroNull); ok || err != nil {
		return err
	}
	val, _, err := binlog.CellValue(v, 0, typ, meta, col.field, false)
	if err != nil {
		return fmt.Errorf("column %s: decode binlog value: %w", col.Name, err)
	}
	return appendValue(b, col, val.Raw(), true, zeroNull)
}

// appendCellFast is appendCell's direct decoding; ok is false for a type and kind it leaves to the text
// path. v holds exactly the cell's bytes.
func appendCellFast(b array.Builder, col *Column, typ byte, meta uint16, v []byte, zeroNull bool) (ok bool, err error) {
	switch typ {
	case binlog.TypeLongLong:
		switch col.Kind {
		case KindInt64:
			b.(*array.Int64Builder).Append(int64(binary.LittleEndian.Uint64(v)))
			return true, nil
		case KindUint64:
			b.(*array.Uint64Builder).Append(binary.LittleEndian.Uint64(v))
			return true, nil
		}
	case binlog.TypeLong:
		switch col.Kind {
		case KindInt32:
			b.(*array.Int32Builder).Append(int32(binary.LittleEndian.Uint32(v)))
			return true, nil
		case KindUint32:
			b.(*array.Uint32Builder).Append(binary.LittleEndian.Uint32(v))
			return true, nil
		}
	case binlog.TypeInt24:
		u := uint32(v[0]) | uint32(v[1])<<8 | uint32(v[2])<<16
		switch col.Kind {
		case KindInt32:
			b.(*array.Int32Builder).Append(int32(u<<8) >> 8) // sign-extend the 24 bits
			return true, nil
		case KindUint32:
			b.(*array.Uint32Builder).Append(u)
			return true, nil
		}
	case binlog.TypeShort:
		switch col.Kind {
		case KindInt16:
			b.(*array.Int16Builder).Append(int16(binary.LittleEndian.Uint16(v)))
			return true, nil
		case KindUint16:
			b.(*array.Uint16Builder).Append(binary.LittleEndian.Uint16(v))
			return true, nil
		}
	case binlog.TypeTiny:
		switch col.Kind {
		case KindInt8:
			b.(*array.Int8Builder).Append(int8(v[0]))
			return true, nil
		case KindUint8:
			b.(*array.Uint8Builder).Append(v[0])
			return true, nil
		}
	case binlog.TypeDouble:
		if col.Kind == KindFloat64 {
			b.(*array.Float64Builder).Append(math.Float64frombits(binary.LittleEndian.Uint64(v)))
			return true, nil
		}
	case binlog.TypeVarchar, binlog.TypeVarString:
		if col.Kind == KindString || col.Kind == KindJSON {
			return true, appendText(b, col, varData(v, meta))
		}
	case binlog.TypeBlob:
		// MariaDB's JSON is LONGTEXT, and TEXT columns come as blobs too.
		if (col.Kind == KindString || col.Kind == KindJSON) && meta >= 1 && meta <= 4 {
			return true, appendText(b, col, v[meta:])
		}
	case binlog.TypeNewDecimal:
		if col.Kind == KindDecimal128 {
			if n, ok := binDecimal(v, meta); ok && int32(meta&0xff) == col.Scale {
				b.(*array.Decimal128Builder).Append(decimal128.FromI64(n))
				return true, nil
			}
		}
	case binlog.TypeDateTime2:
		if col.Kind == KindDatetime {
			y, mo, d, h, mi, s, us := datetime2(v, meta)
			return true, appendCivil(b, col, v, y, mo, d, h, mi, s, us, zeroNull)
		}
	case binlog.TypeTimestamp2:
		if col.Kind == KindTimestamp {
			sec := binary.BigEndian.Uint32(v)
			if sec == 0 {
				// 0 is the zero timestamp ("0000-00-00 00:00:00"), as in the text form.
				return true, zeroDate(b, col, v, zeroNull)
			}
			b.(*array.TimestampBuilder).Append(arrow.Timestamp(int64(sec)*1_000_000 + fracMicros(v[4:], meta)))
			return true, nil
		}
	case binlog.TypeDate, binlog.TypeNewDate:
		if col.Kind == KindDate {
			u := uint32(v[0]) | uint32(v[1])<<8 | uint32(v[2])<<16
			d, mo, y := int(u&31), int(u>>5&15), int(u>>9)
			if y == 0 || mo == 0 || d == 0 {
				return true, zeroDate(b, col, v, zeroNull)
			}
			b.(*array.Date32Builder).Append(arrow.Date32(civil.Days(int64(y), int64(mo), int64(d))))
			return true, nil
		}
	}
	return false, nil
}

// appendText appends text after checking it is UTF-8, as appendValue does.
func appendText(b array.Builder, col *Column, v []byte) error {
	if !validUTF8(v) {
		return notUTF8(col, v)
	}
	b.(*array.StringBuilder).BinaryBuilder.Append(v)
	return nil
}

// varData is a VARCHAR cell's bytes after its length prefix (two bytes when the column may exceed 255).
func varData(v []byte, meta uint16) []byte {
	if meta > 255 {
		return v[2:]
	}
	return v[1:]
}

// zeroDate handles a zero date the way appendValue does.
func zeroDate(b array.Builder, col *Column, v []byte, zeroNull bool) error {
	if zeroNull {
		b.AppendNull()
		return nil
	}
	if col.Hidden {
		return &valueError{fmt.Sprintf("column %s holds a zero date, which no destination type can hold (set zero_date: null to carry it as null)", col.Name)}
	}
	return &valueError{fmt.Sprintf("column %s holds a zero date (binary log bytes %x), which no destination type can hold (set zero_date: null to carry it as null)", col.Name, v)}
}

// appendCivil appends a DATETIME's parts as microseconds since the epoch, read as UTC. Out-of-range parts
// (ALLOW_INVALID_DATES' 2024-02-31) carry over as time.Date's do, so the value is the text path's.
func appendCivil(b array.Builder, col *Column, v []byte, y, mo, d, h, mi, s, us int, zeroNull bool) error {
	if y == 0 || mo == 0 || d == 0 {
		return zeroDate(b, col, v, zeroNull)
	}
	secs := (civil.Days(int64(y), int64(mo), int64(d))*24+int64(h))*3600 + int64(mi)*60 + int64(s)
	b.(*array.TimestampBuilder).Append(arrow.Timestamp(secs*1_000_000 + int64(us)))
	return nil
}

// datetime2 reads MySQL 5.6's DATETIME(fsp) binary form: 40 bits of packed year*13+month, day, hour,
// minute, second (big-endian, offset by 2^39), then the fraction.
func datetime2(v []byte, meta uint16) (y, mo, d, h, mi, s, us int) {
	packed := (uint64(v[0])<<32 | uint64(v[1])<<24 | uint64(v[2])<<16 | uint64(v[3])<<8 | uint64(v[4])) - 0x8000000000
	ymd, hms := packed>>17, packed%(1<<17)
	ym := ymd >> 5
	return int(ym / 13), int(ym % 13), int(ymd % 32), int(hms >> 12), int((hms >> 6) % 64), int(hms % 64), int(fracMicros(v[5:], meta))
}

// fracMicros reads the fraction of a DATETIME2/TIMESTAMP2 of fsp meta as microseconds, truncated to fsp
// digits as vitess's text form is.
func fracMicros(f []byte, meta uint16) int64 {
	switch meta {
	case 1, 2:
		n := int64(f[0]) // hundredths
		if meta == 1 {
			n = n / 10 * 10
		}
		return n * 10_000
	case 3, 4:
		n := int64(f[0])<<8 | int64(f[1]) // 1/10000 s
		if meta == 3 {
			n = n / 10 * 10
		}
		return n * 100
	case 5, 6:
		n := int64(f[0])<<16 | int64(f[1])<<8 | int64(f[2])
		if meta == 5 {
			n = n / 10 * 10
		}
		return n
	}
	return 0
}

// digBytes is how many bytes a group of 0–8 decimal digits takes in MySQL's binary DECIMAL.
var digBytes = [10]int{0, 1, 1, 2, 2, 3, 3, 4, 4, 4}

// binDecimal reads MySQL's binary DECIMAL(p,s) (meta is p<<8|s) of at most 18 digits as its unscaled
// integer; ok is false for a wider one, which takes the text path.
func binDecimal(v []byte, meta uint16) (n int64, ok bool) {
	prec, scale := int(meta>>8), int(meta&0xff)
	if prec > 18 || scale > prec {
		return 0, false
	}
	intg := prec - scale
	intg0, intgx := intg/9, intg%9
	frac0, fracx := scale/9, scale%9
	l := intg0*4 + digBytes[intgx] + frac0*4 + digBytes[fracx]
	if len(v) < l {
		return 0, false
	}
	// The first bit is the sign, inverted; a negative number's bytes are all inverted.
	neg := v[0]&0x80 == 0
	var mask byte
	if neg {
		mask = 0xff
	}
	at := 0
	read := func(nb int) int64 {
		var x int64
		for i := range nb {
			c := v[at+i] ^ mask
			if at+i == 0 {
				c ^= 0x80
			}
			x = x<<8 | int64(c)
		}
		at += nb
		return x
	}
	n = read(digBytes[intgx])
	for range intg0 {
		n = n*1_000_000_000 + read(4)
	}
	for range frac0 {
		n = n*1_000_000_000 + read(4)
	}
	if fracx > 0 {
		n = n*pow10[fracx] + read(digBytes[fracx])
	}
	if neg {
		n = -n
	}
	return n, true
}

var pow10 = [10]int64{1, 10, 100, 1000, 10_000, 100_000, 1_000_000, 10_000_000, 100_000_000, 1_000_000_000}
