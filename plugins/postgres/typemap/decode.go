package typemap

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"

	"github.com/skippr-dev/skippr/plugin-sdk/civil"
	"github.com/skippr-dev/skippr/plugin-sdk/values"
)

// A value its Arrow type cannot hold — a timestamp from int64's last microsecond on (PostgreSQL goes to
// 294276 AD, timestamp[us] to 294247-01-10 04:00:54.775807 UTC, which carries infinity), NaN or ±Infinity in
// a numeric(p,s) — is reported as a *values.Unrepresentable, never mapped to a stand-in: the source applies
// the pipeline's on_unrepresentable policy to it (plugin-sdk/values). ±infinity in a date or timestamp is
// carried as the values that plugin-sdk/values names for it, which no finite value takes, so a PostgreSQL
// destination writes back exactly what the source had.

// Append decodes one value in PostgreSQL's text form and appends it to b, a builder of t.Arrow().
func Append(t *Type, b array.Builder, text []byte) error {
	// Strings and booleans, most of a streamed row, go in without a string copy of the value (an
	// allocation per value: BENCHMARKS.md, 2026-12-04).
	switch t.Kind {
	case KindString:
		if !utf8.Valid(text) {
			return fmt.Errorf("%s value is not valid UTF-8", t.Name)
		}
		b.(*array.StringBuilder).BinaryBuilder.Append(text)
		return nil
	case KindBool:
		switch {
		case len(text) == 1 && text[0] == 't':
			b.(*array.BooleanBuilder).Append(true)
		case len(text) == 1 && text[0] == 'f':
			b.(*array.BooleanBuilder).Append(false)
		default:
			return fmt.Errorf("boolean %q: want t or f", text)
		}
		return nil
	}
	s := string(text)
	switch t.Kind {
	case KindInt16:
		v, err := strconv.ParseInt(s, 10, 16)
		if err != nil {
			return err
		}
		b.(*array.Int16Builder).Append(int16(v))
	case KindInt32:
		v, err := strconv.ParseInt(s, 10, 32)
		if err != nil {
			return err
		}
		b.(*array.Int32Builder).Append(int32(v))
	case KindInt64:
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return err
		}
		b.(*array.Int64Builder).Append(v)
	case KindFloat32:
		v, err := strconv.ParseFloat(s, 32)
		if err != nil {
			return err
		}
		b.(*array.Float32Builder).Append(float32(v))
	case KindFloat64:
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return err
		}
		b.(*array.Float64Builder).Append(v)
	case KindDecimal:
		n, err := ParseDecimal(s, t.Precision, t.Scale)
		if err != nil {
			return err
		}
		b.(*array.Decimal128Builder).Append(n)
	case KindBytes:
		v, err := ParseBytea(s)
		if err != nil {
			return err
		}
		b.(*array.BinaryBuilder).Append(v)
	case KindUUID:
		v, err := ParseUUID(s)
		if err != nil {
			return err
		}
		b.(*array.FixedSizeBinaryBuilder).Append(v[:])
	case KindDate:
		v, err := ParseDate(s)
		if err != nil {
			return err
		}
		b.(*array.Date32Builder).Append(arrow.Date32(v))
	case KindTime:
		v, err := ParseTime(s)
		if err != nil {
			return err
		}
		b.(*array.Time64Builder).Append(arrow.Time64(v))
	case KindTimestamp, KindTimestampTZ:
		v, err := ParseTimestamp(s)
		if err != nil {
			return err
		}
		b.(*array.TimestampBuilder).Append(arrow.Timestamp(v))
	case KindInterval:
		v, err := ParseInterval(s)
		if err != nil {
			return err
		}
		b.(*array.MonthDayNanoIntervalBuilder).Append(v)
	case KindList:
		elems, err := ParseArray(s)
		if err != nil {
			if strings.Contains(err.Error(), errMultiDim) {
				return values.Unrepresentablef(s, "%s arrays of more than one dimension have no list<%s> value", t.Name, t.Elem.Arrow())
			}
			return err
		}
		lb := b.(*array.ListBuilder)
		lb.Append(true)
		vb := lb.ValueBuilder()
		// An element the element type cannot hold becomes a NULL element, so the list stays whole; the first
		// such element is reported (Appended), and the policy decides whether that may stand.
		var first *values.Unrepresentable
		for i, e := range elems {
			if e == nil {
				vb.AppendNull()
				continue
			}
			err := Append(t.Elem, vb, []byte(*e))
			var u *values.Unrepresentable
			switch {
			case err == nil:
			case errors.As(err, &u):
				vb.AppendNull()
				if first == nil {
					first = &values.Unrepresentable{Value: s, Reason: fmt.Sprintf("element %d (%s): %s", i+1, u.Value, u.Reason), Appended: true}
				}
			default:
				return fmt.Errorf("array element: %w", err)
			}
		}
		if first != nil {
			return first
		}
		if strings.HasPrefix(s, "[") {
			// PostgreSQL prints the bounds only when the lower bound is not 1; a list has no lower bound.
			bounds, _, _ := strings.Cut(s, "=")
			return &values.Unrepresentable{Value: s, Reason: fmt.Sprintf("array bounds %s dropped: a list<%s> starts at its first element", bounds, t.Elem.Arrow()), Appended: true}
		}
	default:
		return fmt.Errorf("type %s: unknown kind %d", t.Name, t.Kind)
	}
	return nil
}

// ParseDecimal parses a numeric's text exactly (no floating point on the way) into a decimal of the column's
// precision and scale.
func ParseDecimal(s string, precision, scale int32) (decimal128.Num, error) {
	switch s {
	case "NaN", "Infinity", "-Infinity":
		return decimal128.Num{}, numericSpecial(s, precision, scale)
	}
	neg := strings.HasPrefix(s, "-")
	digits := strings.TrimPrefix(s, "-")
	intPart, frac, _ := strings.Cut(digits, ".")
	if int32(len(frac)) > scale {
		return decimal128.Num{}, fmt.Errorf("numeric %s has more than %d decimal places", s, scale)
	}
	frac += strings.Repeat("0", int(scale)-len(frac))
	all := strings.TrimLeft(intPart+frac, "0")
	if all == "" {
		return decimal128.Num{}, nil
	}
	if int32(len(all)) > precision {
		return decimal128.Num{}, fmt.Errorf("numeric %s does not fit decimal128(%d,%d)", s, precision, scale)
	}
	for _, c := range all {
		if c < '0' || c > '9' {
			return decimal128.Num{}, fmt.Errorf("numeric %q is not a decimal number", s)
		}
	}
	var n decimal128.Num
	if len(all) <= 18 {
		v, _ := strconv.ParseInt(all, 10, 64)
		n = decimal128.FromI64(v)
	} else {
		bi, ok := new(big.Int).SetString(all, 10)
		if !ok {
			return decimal128.Num{}, fmt.Errorf("numeric %q is not a decimal number", s)
		}
		n = decimal128.FromBigInt(bi)
	}
	if neg {
		n = n.Negate()
	}
	return n, nil
}

// numericSpecial is the error for NaN and ±Infinity in a constrained numeric.
func numericSpecial(s string, precision, scale int32) error {
	return values.Unrepresentablef(s, "numeric %s cannot be represented as decimal128(%d,%d) (an unconstrained numeric column is carried as text and keeps it)", s, precision, scale)
}

// ParseBytea decodes bytea's hex text form (\x0102...).
func ParseBytea(s string) ([]byte, error) {
	if !strings.HasPrefix(s, `\x`) {
		return nil, errors.New(`bytea value is not in hex form (\x...); the session must set bytea_output = hex`)
	}
	return hex.DecodeString(s[2:])
}

// ParseUUID decodes a UUID's canonical text form.
func ParseUUID(s string) ([16]byte, error) {
	var out [16]byte
	h := strings.ReplaceAll(s, "-", "")
	if len(h) != 32 {
		return out, fmt.Errorf("uuid %q: want 32 hex digits", s)
	}
	if _, err := hex.Decode(out[:], []byte(h)); err != nil {
		return out, fmt.Errorf("uuid %q: %w", s, err)
	}
	return out, nil
}

// parseYMD reads "Y-MM-DD" (any number of year digits) and returns the rest of s.
func parseYMD(s string) (y, m, d int64, rest string, err error) {
	i := strings.IndexByte(s, '-')
	if i <= 0 || len(s) < i+6 || s[i+3] != '-' {
		return 0, 0, 0, "", fmt.Errorf("date %q: want YYYY-MM-DD", s)
	}
	if y, err = strconv.ParseInt(s[:i], 10, 64); err == nil {
		if m, err = strconv.ParseInt(s[i+1:i+3], 10, 64); err == nil {
			d, err = strconv.ParseInt(s[i+4:i+6], 10, 64)
		}
	}
	if err != nil || m < 1 || m > 12 || d < 1 || d > 31 {
		return 0, 0, 0, "", fmt.Errorf("date %q: want YYYY-MM-DD", s)
	}
	return y, m, d, s[i+6:], nil
}

func bc(s string) (string, bool) {
	if strings.HasSuffix(s, " BC") {
		return strings.TrimSuffix(s, " BC"), true
	}
	return s, false
}

// ParseDate returns days since 1970-01-01; every finite PostgreSQL date fits date32, and ±infinity is
// values.DateInfinity and values.DateNegInfinity.
func ParseDate(s string) (int32, error) {
	switch s {
	case "infinity":
		return int32(values.DateInfinity), nil
	case "-infinity":
		return int32(values.DateNegInfinity), nil
	}
	s2, isBC := bc(s)
	y, m, d, rest, err := parseYMD(s2)
	if err != nil {
		return 0, err
	}
	if rest != "" {
		return 0, fmt.Errorf("date %q: unexpected %q", s, rest)
	}
	if isBC {
		y = 1 - y
	}
	return int32(civil.Days(y, m, d)), nil
}

// parseClock reads "HH:MM:SS[.ffffff]" and returns microseconds and the rest of s.
func parseClock(s string) (int64, string, error) {
	if len(s) < 8 || s[2] != ':' || s[5] != ':' {
		return 0, "", fmt.Errorf("time %q: want HH:MM:SS", s)
	}
	h, err1 := strconv.Atoi(s[0:2])
	mi, err2 := strconv.Atoi(s[3:5])
	se, err3 := strconv.Atoi(s[6:8])
	if err1 != nil || err2 != nil || err3 != nil {
		return 0, "", fmt.Errorf("time %q: want HH:MM:SS", s)
	}
	us := (int64(h)*3600 + int64(mi)*60 + int64(se)) * 1e6
	rest := s[8:]
	if strings.HasPrefix(rest, ".") {
		j := 1
		for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
			j++
		}
		frac := rest[1:j]
		if len(frac) > 6 {
			return 0, "", fmt.Errorf("time %q: more than 6 fractional digits", s)
		}
		f, _ := strconv.ParseInt(frac+strings.Repeat("0", 6-len(frac)), 10, 64)
		us += f
		rest = rest[j:]
	}
	return us, rest, nil
}

// ParseTime returns microseconds since midnight (24:00:00 is 86 400 000 000, as PostgreSQL allows it).
func ParseTime(s string) (int64, error) {
	us, rest, err := parseClock(s)
	if err != nil {
		return 0, err
	}
	if rest != "" {
		return 0, fmt.Errorf("time %q: unexpected %q", s, rest)
	}
	return us, nil
}

// ParseTimestamp returns microseconds since 1970-01-01 00:00:00 UTC for timestamp and timestamptz text forms
// (an offset, if present, is applied), ±infinity as values.TimestampInfinity and values.TimestampNegInfinity.
// Instants from int64's last microsecond on are Unrepresentable: that microsecond carries infinity.
func ParseTimestamp(s string) (int64, error) {
	switch s {
	case "infinity":
		return int64(values.TimestampInfinity), nil
	case "-infinity":
		return int64(values.TimestampNegInfinity), nil
	}
	s2, isBC := bc(s)
	y, m, d, rest, err := parseYMD(s2)
	if err != nil {
		return 0, fmt.Errorf("timestamp %q: %w", s, err)
	}
	if !strings.HasPrefix(rest, " ") {
		return 0, fmt.Errorf("timestamp %q: want a time after the date", s)
	}
	us, rest, err := parseClock(rest[1:])
	if err != nil {
		return 0, fmt.Errorf("timestamp %q: %w", s, err)
	}
	var offset int64
	if rest != "" {
		sign := int64(1)
		switch rest[0] {
		case '+':
		case '-':
			sign = -1
		default:
			return 0, fmt.Errorf("timestamp %q: unexpected %q", s, rest)
		}
		// Hours, then minutes and seconds when given: at most three parts (cut, not split: this runs
		// for every streamed timestamptz).
		off, mult := rest[1:], int64(3600)
		for {
			p, more, found := strings.Cut(off, ":")
			v, err := strconv.ParseInt(p, 10, 64)
			if err != nil || mult == 0 {
				return 0, fmt.Errorf("timestamp %q: bad offset %q", s, rest)
			}
			offset += v * mult
			if !found {
				break
			}
			off, mult = more, mult/60
		}
		offset *= sign * 1e6
	}
	if isBC {
		y = 1 - y
	}
	// The same bound as the binary decoder's, to the microsecond: whatever one accepts, so does the other.
	v, ok := timestampMicros(civil.Days(y, m, d), us-offset)
	if !ok || v == int64(values.TimestampInfinity) {
		return 0, outOfRange(s)
	}
	return v, nil
}

// timestampMicros is days·86 400 000 000 + us, and false when that is outside int64.
func timestampMicros(days, us int64) (int64, bool) {
	const day = int64(86400e6)
	if days > math.MaxInt64/day || days < math.MinInt64/day {
		return 0, false
	}
	d := days * day
	if (us > 0 && d > math.MaxInt64-us) || (us < 0 && d < math.MinInt64-us) {
		return 0, false
	}
	return d + us, true
}

func outOfRange(s string) error {
	return values.Unrepresentablef(s, "timestamp %s is outside the range of timestamp[us] (294247-01-10 04:00:54.775806 UTC at most; the next microsecond carries infinity)", s)
}

// ParseInterval parses the iso_8601 IntervalStyle (P1Y2M3DT4H5M6.5S, each part possibly negative).
func ParseInterval(s string) (arrow.MonthDayNanoInterval, error) {
	var out arrow.MonthDayNanoInterval
	if !strings.HasPrefix(s, "P") {
		return out, fmt.Errorf("interval %q is not in ISO 8601 form; the session must set IntervalStyle = iso_8601", s)
	}
	rest, inTime := s[1:], false
	var nanos int64
	for rest != "" {
		if rest[0] == 'T' {
			inTime, rest = true, rest[1:]
			continue
		}
		j := 0
		for j < len(rest) && (rest[j] == '-' || rest[j] == '+' || rest[j] == '.' || (rest[j] >= '0' && rest[j] <= '9')) {
			j++
		}
		if j == 0 || j == len(rest) {
			return out, fmt.Errorf("interval %q: bad part %q", s, rest)
		}
		num, unit := rest[:j], rest[j]
		rest = rest[j+1:]
		if !inTime {
			v, err := strconv.ParseInt(num, 10, 32)
			if err != nil {
				return out, fmt.Errorf("interval %q: %w", s, err)
			}
			switch unit {
			case 'Y':
				out.Months += int32(v) * 12
			case 'M':
				out.Months += int32(v)
			case 'W':
				out.Days += int32(v) * 7
			case 'D':
				out.Days += int32(v)
			default:
				return out, fmt.Errorf("interval %q: unknown unit %c", s, unit)
			}
			continue
		}
		var mult int64
		switch unit {
		case 'H':
			mult = 3600e9
		case 'M':
			mult = 60e9
		case 'S':
			mult = 1e9
		default:
			return out, fmt.Errorf("interval %q: unknown unit %c", s, unit)
		}
		whole, frac, _ := strings.Cut(num, ".")
		neg := strings.HasPrefix(whole, "-")
		w, err := strconv.ParseInt(whole, 10, 64)
		if err != nil && whole != "-" && whole != "" {
			return out, fmt.Errorf("interval %q: %w", s, err)
		}
		if w > math.MaxInt64/mult-1 || w < math.MinInt64/mult+1 {
			return out, fmt.Errorf("interval %q is outside month_day_nano_interval's range", s)
		}
		v := w * mult
		if frac != "" {
			if len(frac) > 9 {
				frac = frac[:9]
			}
			f, err := strconv.ParseInt(frac+strings.Repeat("0", 9-len(frac)), 10, 64)
			if err != nil {
				return out, fmt.Errorf("interval %q: %w", s, err)
			}
			f = f * (mult / 1e9)
			if neg {
				v -= f
			} else {
				v += f
			}
		}
		if (v > 0 && nanos > math.MaxInt64-v) || (v < 0 && nanos < math.MinInt64-v) {
			return out, fmt.Errorf("interval %q is outside month_day_nano_interval's range", s)
		}
		nanos += v
	}
	out.Nanoseconds = nanos
	return out, nil
}

const errMultiDim = "multi-dimensional arrays are not supported"

// ParseArray splits a one-dimensional array's text form into its elements (nil for NULL). A dimension
// decoration ([0:2]={...}) is dropped: Arrow lists start at 0.
func ParseArray(s string) ([]*string, error) {
	if strings.HasPrefix(s, "[") {
		i := strings.Index(s, "={")
		if i < 0 {
			return nil, fmt.Errorf("array %q: bad dimension decoration", s)
		}
		if strings.Count(s[:i], "[") > 1 {
			return nil, fmt.Errorf("array %.40q: "+errMultiDim, s)
		}
		s = s[i+1:]
	}
	if len(s) < 2 || s[0] != '{' || s[len(s)-1] != '}' {
		return nil, fmt.Errorf("array %.40q: want {...}", s)
	}
	body := s[1 : len(s)-1]
	var out []*string
	if body == "" {
		return out, nil
	}
	i := 0
	for {
		if i < len(body) && body[i] == '{' {
			return nil, fmt.Errorf("array %.40q: "+errMultiDim, s)
		}
		var (
			b      strings.Builder
			quoted bool
		)
		if i < len(body) && body[i] == '"' {
			quoted = true
			i++
			for {
				if i >= len(body) {
					return nil, fmt.Errorf("array %.40q: unterminated quoted element", s)
				}
				c := body[i]
				if c == '\\' && i+1 < len(body) {
					b.WriteByte(body[i+1])
					i += 2
					continue
				}
				if c == '"' {
					i++
					break
				}
				b.WriteByte(c)
				i++
			}
		} else {
			for i < len(body) && body[i] != ',' {
				if body[i] == '\\' && i+1 < len(body) {
					i++
				}
				b.WriteByte(body[i])
				i++
			}
		}
		v := b.String()
		if !quoted && strings.EqualFold(v, "NULL") {
			out = append(out, nil)
		} else {
			out = append(out, &v)
		}
		if i >= len(body) {
			return out, nil
		}
		if body[i] != ',' {
			return nil, fmt.Errorf("array %.40q: want , after an element", s)
		}
		i++
	}
}
