package source

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
)

// batchCase is a column and text-protocol values of it, as the server writes them (nil for NULL), with
// forms and bad values the fast path must leave to appendValue.
type batchCase struct {
	def  ColumnDef
	vals [][]byte
}

// batchCases are a column of every kind with edge values and a few hundred random ones each.
func batchCases(rng *rand.Rand) []batchCase {
	b := func(ss ...string) [][]byte {
		out := [][]byte{nil, []byte{}} // NULL and the empty value first: a batch's first row may be either
		for _, s := range ss {
			out = append(out, []byte(s))
		}
		return out
	}
	ints := func(lo, hi int64, edge ...string) [][]byte {
		vals := b(append(edge, strconv.FormatInt(lo, 10), strconv.FormatInt(hi, 10), "0", "-0", "007", "abc", "1.5", "+1", "-", " 1")...)
		for range 300 {
			vals = append(vals, strconv.AppendInt(nil, lo+int64(rng.Uint64N(uint64(hi-lo)+1)), 10))
			if rng.IntN(10) == 0 {
				vals = append(vals, nil)
			}
		}
		return vals
	}
	decimals := func(p, s int, edge ...string) [][]byte {
		vals := b(append(edge, "abc", "1e5", "1.2.3", "--1", ".5")...)
		for range 300 {
			// As the server writes them: an integer part ("0" when none) and exactly s fraction digits.
			var sb strings.Builder
			if rng.IntN(2) == 0 {
				sb.WriteByte('-')
			}
			ip := rng.IntN(p - s + 1)
			if ip == 0 {
				sb.WriteByte('0')
			}
			for range ip {
				sb.WriteByte(byte('0' + rng.IntN(10)))
			}
			if s > 0 {
				sb.WriteByte('.')
				for range s {
					sb.WriteByte(byte('0' + rng.IntN(10)))
				}
			}
			vals = append(vals, []byte(sb.String()))
		}
		return vals
	}
	civilVals := func(withTime bool, fsp int, edge ...string) [][]byte {
		vals := b(append(edge, "x026-12-04", "2026-12-04T01:40:05", "2026-12-04 01:40:05.", "2026-12-04 1:40:05", "2024-00-10", "2024-02-31")...)
		for range 300 {
			s := fmt.Sprintf("%04d-%02d-%02d", 1+rng.IntN(9999), 1+rng.IntN(12), 1+rng.IntN(28))
			if rng.IntN(20) == 0 {
				s = fmt.Sprintf("%04d-%02d-%02d", rng.IntN(3), rng.IntN(2), rng.IntN(2)) // zero parts
			}
			if withTime {
				s += fmt.Sprintf(" %02d:%02d:%02d", rng.IntN(24), rng.IntN(60), rng.IntN(60))
				if fsp > 0 {
					s += "." + fmt.Sprintf("%06d", rng.IntN(1_000_000))[:fsp]
				}
			}
			vals = append(vals, []byte(s))
		}
		return vals
	}
	texts := func(extra ...string) [][]byte {
		vals := b(append(extra, "name-1", "ü€😀", "\xff\xfe not utf-8", "ok\x00nul", strings.Repeat("long ", 3000), "\xed\xa0\x80")...)
		alphabet := []rune("abz09 -_\"{}:,é€😀\u0301")
		for range 300 {
			n := rng.IntN(60)
			if rng.IntN(50) == 0 {
				n = rng.IntN(20000)
			}
			var sb strings.Builder
			for range n {
				sb.WriteRune(alphabet[rng.IntN(len(alphabet))])
			}
			v := []byte(sb.String())
			if rng.IntN(30) == 0 && len(v) > 0 {
				v[rng.IntN(len(v))] = 0xc0 // breaks UTF-8 (0xc0 is never valid)
			}
			vals = append(vals, v)
			if rng.IntN(10) == 0 {
				vals = append(vals, nil)
			}
		}
		return vals
	}
	bins := func() [][]byte {
		vals := b("\xff\x00", "\x00\x00\x00\x00", "\xc0")
		for range 300 {
			v := make([]byte, rng.IntN(40))
			for i := range v {
				v[i] = byte(rng.Uint32())
			}
			vals = append(vals, v)
		}
		return vals
	}
	floats := func() [][]byte {
		vals := b("1.5", "-0", "1.7976931348623157e+308", "5e-324", "-3.4028234663852886e+38", "1e-45", "abc", "NaN")
		for range 100 {
			vals = append(vals, strconv.AppendFloat(nil, rng.NormFloat64()*math.Pow(10, float64(rng.IntN(40)-20)), 'g', -1, 64))
		}
		return vals
	}
	return []batchCase{
		{ColumnDef{Name: "i8", DataType: "tinyint", ColumnType: "tinyint(4)"}, ints(math.MinInt8, math.MaxInt8)},
		{ColumnDef{Name: "u8", DataType: "tinyint", ColumnType: "tinyint(3) unsigned"}, ints(0, math.MaxUint8, "-1")},
		{ColumnDef{Name: "i16", DataType: "smallint", ColumnType: "smallint(6)"}, ints(math.MinInt16, math.MaxInt16)},
		{ColumnDef{Name: "u16", DataType: "smallint", ColumnType: "smallint(5) unsigned"}, ints(0, math.MaxUint16)},
		{ColumnDef{Name: "i24", DataType: "mediumint", ColumnType: "mediumint(9)"}, ints(-1<<23, 1<<23-1)},
		{ColumnDef{Name: "i32", DataType: "int", ColumnType: "int(11)"}, ints(math.MinInt32, math.MaxInt32)},
		{ColumnDef{Name: "u32", DataType: "int", ColumnType: "int(10) unsigned"}, ints(0, math.MaxUint32)},
		{ColumnDef{Name: "i64", DataType: "bigint", ColumnType: "bigint(20)"}, ints(math.MinInt64/2, math.MaxInt64/2, "-9223372036854775808", "9223372036854775807", "9223372036854775808", "999999999999999999", "-999999999999999999", "1000000000000000000")},
		{ColumnDef{Name: "u64", DataType: "bigint", ColumnType: "bigint(20) unsigned"}, ints(0, math.MaxInt64, "18446744073709551615", "18446744073709551616", "9223372036854775808", "12345678901234567890", "-1", "-0")},
		{ColumnDef{Name: "yr", DataType: "year", ColumnType: "year(4)"}, b("0", "1901", "2155", "0000")},
		{ColumnDef{Name: "d12", DataType: "decimal", ColumnType: "decimal(12,2)", Precision: 12, Scale: 2}, decimals(12, 2, "0.00", "-0.01", "9999999999.99", "-9999999999.99", "1.5", "12")},
		{ColumnDef{Name: "d18", DataType: "decimal", ColumnType: "decimal(18,0)", Precision: 18, Scale: 0}, decimals(18, 0, "999999999999999999", "-999999999999999999", "0")},
		{ColumnDef{Name: "d18s", DataType: "decimal", ColumnType: "decimal(18,18)", Precision: 18, Scale: 18}, decimals(18, 18, "0.999999999999999999", "-0.000000000000000001")},
		{ColumnDef{Name: "d38", DataType: "decimal", ColumnType: "decimal(38,10)", Precision: 38, Scale: 10}, decimals(38, 10, "9999999999999999999999999999.9999999999")},
		{ColumnDef{Name: "d65", DataType: "decimal", ColumnType: "decimal(65,30)", Precision: 65, Scale: 30}, decimals(65, 30)},
		{ColumnDef{Name: "f32", DataType: "float", ColumnType: "float"}, floats()},
		{ColumnDef{Name: "f64", DataType: "double", ColumnType: "double"}, floats()},
		{ColumnDef{Name: "bits", DataType: "bit", ColumnType: "bit(64)"}, b("\x01", "\x03\xff", "\xff\xff\xff\xff\xff\xff\xff\xff", "123456789")},
		{ColumnDef{Name: "day", DataType: "date", ColumnType: "date"}, civilVals(false, 0, "1970-01-01", "1969-12-31", "0000-00-00", "1000-01-01", "9999-12-31", "0001-01-01")},
		{ColumnDef{Name: "dt6", DataType: "datetime", ColumnType: "datetime(6)", Scale: 6}, civilVals(true, 6, "0000-00-00 00:00:00.000000", "1000-01-01 00:00:00.000000", "9999-12-31 23:59:59.999999", "1969-12-31 23:59:59.999999", "2026-12-04 01:40:05.1234567")},
		{ColumnDef{Name: "dt0", DataType: "datetime", ColumnType: "datetime", Scale: 0}, civilVals(true, 0, "0000-00-00 00:00:00", "2026-12-04 01:40:05", "2026-12-04")},
		{ColumnDef{Name: "ts3", DataType: "timestamp", ColumnType: "timestamp(3)", Scale: 3}, civilVals(true, 3, "0000-00-00 00:00:00.000", "1970-01-01 00:00:01.000", "2038-01-19 03:14:07.999")},
		{ColumnDef{Name: "tm", DataType: "time", ColumnType: "time(6)", Scale: 6}, b("00:00:00.000000", "838:59:59.000000", "-838:59:59.000000", "12:34:56.5", "-00:00:01", "x")},
		{ColumnDef{Name: "s", DataType: "varchar", ColumnType: "varchar(40)", Charset: "utf8mb4"}, texts()},
		{ColumnDef{Name: "txt", DataType: "longtext", ColumnType: "longtext", Charset: "utf8mb3"}, texts()},
		{ColumnDef{Name: "doc", DataType: "json", ColumnType: "json"}, texts(`{"k": 1}`, `[]`, `null`)},
		{ColumnDef{Name: "e", DataType: "enum", ColumnType: "enum('a','b''c','')"}, b("a", "b'c", "é")},
		{ColumnDef{Name: "st", DataType: "set", ColumnType: "set('a','b','c')"}, b("a", "a,b,c", "c")},
		{ColumnDef{Name: "bin", DataType: "binary", ColumnType: "binary(4)"}, bins()},
		{ColumnDef{Name: "vb", DataType: "varbinary", ColumnType: "varbinary(40)"}, bins()},
		{ColumnDef{Name: "blob", DataType: "blob", ColumnType: "blob"}, bins()},
	}
}

// refAppend is the reference: a RecordBuilder with appendValue per cell, as appendRow drove it before rowBatch.
func refAppend(rb *array.RecordBuilder, t *Table, row [][]byte, op change.Op, where string, zeroNull bool) error {
	for i := range t.Columns {
		if row[i] == nil {
			rb.Field(i).AppendNull()
			continue
		}
		if err := appendValue(rb.Field(i), &t.Columns[i], row[i], false, zeroNull); err != nil {
			return err
		}
	}
	rb.Field(len(t.Columns)).(*array.Int8Builder).Append(int8(op))
	if where == "" {
		rb.Field(len(t.Columns) + 1).AppendNull()
	} else {
		rb.Field(len(t.Columns) + 1).(*array.StringBuilder).Append(where)
	}
	rb.Field(len(t.Columns) + 2).AppendNull() // _skippr_committed_at: a snapshot row has no commit time
	return nil
}

// TestRowBatchMatchesAppendValue: rowBatch gives the record appendValue gives, cell by cell, for every kind:
// edge and random values, NULLs and empty values (also as a batch's first row), text that is not UTF-8 where
// the column checks it, zero dates under both zero_date settings, forms only appendValue reads; and the same
// error for a value appendValue refuses. Rows go in batches of random sizes, so growing, the first null of a
// batch and starting a batch after another are crossed too.
func TestRowBatchMatchesAppendValue(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 70))
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	cases := batchCases(rng)
	compared, refused := 0, 0
	for _, zeroNull := range []bool{false, true} {
		for _, c := range cases {
			name := fmt.Sprintf("%s (%s) zeroNull=%v", c.def.Name, c.def.ColumnType, zeroNull)
			tbl, err := TableDef{Columns: []ColumnDef{c.def}, Key: []string{c.def.Name}}.build("t", "db.t", false)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			// The values appendValue refuses are each refused with its error; the rest go in batches.
			var good [][]byte
			for _, v := range c.vals {
				ref := array.NewRecordBuilder(mem, tbl.Schema)
				refErr := refAppend(ref, tbl, [][]byte{v}, change.OpRead, "", zeroNull)
				ref.Release()
				if refErr == nil {
					good = append(good, v)
					continue
				}
				rb := newRowBatch(mem, tbl, zeroNull)
				err := rb.appendRow([][]byte{v}, change.OpRead, "")
				rb.Release()
				var refVE, ve *valueError
				switch {
				case err == nil:
					t.Errorf("%s: %q: appendValue refuses it (%v), rowBatch takes it", name, v, refErr)
				case err.Error() != refErr.Error() || errors.As(err, &ve) != errors.As(refErr, &refVE):
					t.Errorf("%s: %q: rowBatch error %v, appendValue error %v", name, v, err, refErr)
				}
				refused++
			}
			compared += compareBatches(t, name, mem, tbl, rng, zeroNull, func(i int) ([][]byte, bool) {
				if i >= len(good) {
					return nil, false
				}
				return [][]byte{good[i]}, true
			})
		}
	}
	// Every column at once, with rows drawn from each column's accepted values, and a few rows with another
	// op and a position (as no snapshot sends today, but appendRow takes).
	def := TableDef{Key: []string{"i64"}}
	var good [][][]byte
	for _, c := range cases {
		def.Columns = append(def.Columns, c.def)
	}
	tbl, err := def.build("all", "db.all", false)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range cases {
		var ok [][]byte
		for _, v := range c.vals {
			ref := array.NewRecordBuilder(mem, tbl.Schema)
			row := make([][]byte, len(cases))
			row[i] = v
			if refAppend(ref, tbl, row, change.OpRead, "", false) == nil {
				ok = append(ok, v)
			}
			ref.Release()
		}
		good = append(good, ok)
	}
	compared += compareBatches(t, "all columns", mem, tbl, rng, false, func(i int) ([][]byte, bool) {
		if i >= 3000 {
			return nil, false
		}
		row := make([][]byte, len(cases))
		for c := range row {
			row[c] = good[c][rng.IntN(len(good[c]))]
		}
		return row, true
	})
	if compared < 20_000 || refused < 200 {
		t.Fatalf("only %d cells compared and %d refusals", compared, refused)
	}
}

// compareBatches appends the rows next gives to a rowBatch and to the reference in batches of random sizes
// and compares each pair of records; it returns how many cells it compared.
func compareBatches(t *testing.T, name string, mem memory.Allocator, tbl *Table, rng *rand.Rand, zeroNull bool, next func(int) ([][]byte, bool)) int {
	t.Helper()
	rb := newRowBatch(mem, tbl, zeroNull)
	defer rb.Release()
	ref := array.NewRecordBuilder(mem, tbl.Schema)
	defer ref.Release()
	cells, rows, size := 0, 0, 1+rng.IntN(700)
	if rng.IntN(2) == 0 {
		rb.Reserve(size)
	}
	flush := func() {
		got, want := rb.NewRecordBatch(), ref.NewRecordBatch()
		defer got.Release()
		defer want.Release()
		if got.NumRows() != want.NumRows() || got.NumCols() != want.NumCols() || !got.Schema().Equal(want.Schema()) {
			t.Fatalf("%s: records differ (%d and %d rows)", name, got.NumRows(), want.NumRows())
		}
		{
			for i := range int(want.NumCols()) {
				if !sameArray(got.Column(i), want.Column(i)) {
					t.Fatalf("%s: column %s differs after %d rows:\nrowBatch    %v\nappendValue %v", name, want.ColumnName(i), rows, got.Column(i), want.Column(i))
				}
			}
		}
		for i, col := range got.Columns() {
			if v, ok := col.(interface{ ValidateFull() error }); ok {
				if err := v.ValidateFull(); err != nil {
					t.Fatalf("%s: column %s: %v", name, got.ColumnName(i), err)
				}
			}
		}
		cells += int(got.NumRows()) * int(got.NumCols())
		rows, size = 0, 1+rng.IntN(700)
		if rng.IntN(2) == 0 {
			rb.Reserve(size)
		}
	}
	for i := 0; ; i++ {
		row, ok := next(i)
		if !ok {
			break
		}
		op, where := change.OpRead, ""
		if rng.IntN(50) == 0 {
			op, where = change.OpUpdate, fmt.Sprintf("binlog.000001:%d", i)
		}
		if err := rb.appendRow(row, op, where); err != nil {
			t.Fatalf("%s: row %d %q: %v", name, i, row, err)
		}
		if err := refAppend(ref, tbl, row, op, where, zeroNull); err != nil {
			t.Fatalf("%s: row %d %q: reference: %v", name, i, row, err)
		}
		if rows++; rows == size {
			flush()
		}
	}
	flush()
	return cells
}

// TestRowBatchRecordType: the record rowBatch makes has the table's schema, text columns included.
func TestRowBatchRecordType(t *testing.T) {
	tbl, err := TableDef{Columns: []ColumnDef{
		{Name: "id", DataType: "bigint", ColumnType: "bigint(20)"},
		{Name: "s", DataType: "varchar", ColumnType: "varchar(4)"},
		{Name: "b", DataType: "varbinary", ColumnType: "varbinary(4)"},
	}, Key: []string{"id"}}.build("t", "db.t", false)
	if err != nil {
		t.Fatal(err)
	}
	rb := newRowBatch(memory.NewGoAllocator(), tbl, false)
	defer rb.Release()
	if err := rb.appendRow([][]byte{[]byte("1"), []byte("x"), nil}, change.OpRead, ""); err != nil {
		t.Fatal(err)
	}
	rec := rb.NewRecordBatch()
	defer rec.Release()
	if !rec.Schema().Equal(tbl.Schema) {
		t.Fatalf("schema %v, want %v", rec.Schema(), tbl.Schema)
	}
	if _, ok := rec.Column(1).(*array.String); !ok {
		t.Fatalf("text column is %T", rec.Column(1))
	}
	if _, ok := rec.Column(2).(*array.Binary); !ok || rec.Column(2).IsValid(0) {
		t.Fatalf("binary column is %T, valid %v", rec.Column(2), rec.Column(2).IsValid(0))
	}
	if rec.Column(3).DataType().ID() != arrow.INT8 || rec.Column(4).IsValid(0) {
		t.Fatalf("op and position columns: %v %v", rec.Column(3), rec.Column(4))
	}
}

// sameArray is array.Equal, except that floats are compared by their bits (NaN is a value the column carries).
func sameArray(a, b arrow.Array) bool {
	bits := func(arr arrow.Array) []uint64 {
		var out []uint64
		for i := range arr.Len() {
			switch f := arr.(type) {
			case *array.Float32:
				out = append(out, uint64(math.Float32bits(f.Value(i))))
			case *array.Float64:
				out = append(out, math.Float64bits(f.Value(i)))
			}
		}
		return out
	}
	switch a.(type) {
	case *array.Float32, *array.Float64:
		if a.Len() != b.Len() || !arrow.TypeEqual(a.DataType(), b.DataType()) {
			return false
		}
		x, y := bits(a), bits(b)
		for i := range x {
			if a.IsValid(i) != b.IsValid(i) || a.IsValid(i) && x[i] != y[i] {
				return false
			}
		}
		return true
	}
	return array.Equal(a, b)
}

// TestValidUTF8: the ASCII shortcut agrees with utf8.Valid, whatever the length and wherever a non-ASCII or
// invalid byte sits.
func TestValidUTF8(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	pieces := []string{"a", "é", "€", "😀", "\xff", "\xc0", "\xed\xa0\x80", "\xe2\x82", "\x00", "\x7f"}
	for range 20_000 {
		var sb strings.Builder
		for range rng.IntN(40) {
			if rng.IntN(8) == 0 {
				sb.WriteString(pieces[rng.IntN(len(pieces))])
			} else {
				sb.WriteByte(byte('a' + rng.IntN(26)))
			}
		}
		v := []byte(sb.String())
		if got, want := validUTF8(v), utf8.Valid(v); got != want {
			t.Fatalf("%q: %v, utf8.Valid %v", v, got, want)
		}
	}
}
