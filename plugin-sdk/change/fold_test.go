package change

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
)

// row is one change row of a test batch: its op, its key values (one per key column, nil for null) and a value.
type row struct {
	op  Op
	key []any
	v   string
}

// batch is a test batch: key column types (none for a stream without a key) and rows. truncate instead marks
// a truncate at this point.
type batch struct {
	key      []arrow.DataType
	rows     []row
	truncate bool
}

// build makes a change batch with key columns k0.., a value column v and the op column.
func build(t *testing.T, b batch) arrow.RecordBatch {
	t.Helper()
	var fields []arrow.Field
	var names []string
	for i, dt := range b.key {
		n := "k" + string(rune('0'+i))
		fields = append(fields, arrow.Field{Name: n, Type: dt, Nullable: true})
		names = append(names, n)
	}
	fields = append(fields, arrow.Field{Name: "v", Type: arrow.BinaryTypes.String, Nullable: true})
	sc := Schema(fields, names)
	rb := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer rb.Release()
	for _, r := range b.rows {
		for i := range b.key {
			v := r.key[i]
			fb := rb.Field(i)
			if v == nil {
				fb.AppendNull()
				continue
			}
			switch fb := fb.(type) {
			case *array.Int64Builder:
				fb.Append(int64(v.(int)))
			case *array.Int32Builder:
				fb.Append(int32(v.(int)))
			case *array.Int16Builder:
				fb.Append(int16(v.(int)))
			case *array.Int8Builder:
				fb.Append(int8(v.(int)))
			case *array.Uint8Builder:
				fb.Append(uint8(v.(int)))
			case *array.Uint32Builder:
				fb.Append(uint32(v.(int)))
			case *array.Uint64Builder:
				switch x := v.(type) {
				case int:
					fb.Append(uint64(x))
				case uint64:
					fb.Append(x)
				}
			case *array.StringBuilder:
				fb.Append(v.(string))
			case *array.LargeStringBuilder:
				fb.Append(v.(string))
			case *array.Float64Builder:
				fb.Append(v.(float64))
			case *array.TimestampBuilder:
				fb.Append(arrow.Timestamp(v.(int)))
			default:
				t.Fatalf("no test builder for %T", fb)
			}
		}
		rb.Field(len(b.key)).(*array.StringBuilder).Append(r.v)
		rb.Field(len(b.key) + 1).(*array.Int8Builder).Append(int8(r.op))
		rb.Field(len(b.key) + 2).AppendNull()
	}
	return rb.NewRecordBatch()
}

// survivor is what the test expects of a kept row: its value, op and Replaces.
type survivor struct {
	v        string
	op       Op
	replaces bool
}

var (
	i64 = arrow.PrimitiveTypes.Int64
	i32 = arrow.PrimitiveTypes.Int32
	i8  = arrow.PrimitiveTypes.Int8
	u8  = arrow.PrimitiveTypes.Uint8
	u32 = arrow.PrimitiveTypes.Uint32
	u64 = arrow.PrimitiveTypes.Uint64
	str = arrow.BinaryTypes.String
	lst = arrow.BinaryTypes.LargeString
	f64 = arrow.PrimitiveTypes.Float64
	tsu = &arrow.TimestampType{Unit: arrow.Microsecond}
)

// TestFold covers every case the three destination copies (Iceberg, DuckDB, Postgres) handled, and the ones
// where they differed: unsigned keys (the Iceberg and Postgres copies compared them by text, Iceberg's only
// within one batch type), integer keys whose width changes between batches (only DuckDB's copy matched them),
// and the op check (each copy checked a different subset: null ops passed as reads in two of them).
func TestFold(t *testing.T) {
	const (
		R = OpRead
		I = OpInsert
		U = OpUpdate
		D = OpDelete
	)
	// One history per key type: keys 1..5 first, then changes. 3 ends deleted, 4 is deleted and re-inserted.
	history := func(dt arrow.DataType, key func(int) any) []batch {
		k := func(n int) []any { return []any{key(n)} }
		return []batch{
			{key: []arrow.DataType{dt}, rows: []row{{R, k(1), "a1"}, {I, k(2), "b1"}, {I, k(3), "c1"}, {R, k(4), "d1"}, {I, k(5), "e1"}}},
			{key: []arrow.DataType{dt}, rows: []row{{U, k(2), "b2"}, {D, k(3), ""}, {D, k(4), ""}, {I, k(4), "d2"}, {I, k(6), "f1"}, {U, k(2), "b3"}, {I, k(5), "e2"}}},
		}
	}
	want := []survivor{{"a1", R, false}, {"b3", U, true}, {"", D, true}, {"d2", I, true}, {"e2", I, false}, {"f1", I, false}}
	num := func(n int) any { return n }
	text := func(n int) any { return "key-" + string(rune('0'+n)) }
	upsert := func(s []survivor) []survivor {
		out := append([]survivor(nil), s...)
		for i := range out {
			out[i].replaces = true
		}
		return out
	}

	cases := []struct {
		name    string
		batches []batch
		upsert  bool
		want    []survivor
		err     string // substring of the error; the error must be a fault.ErrData
	}{
		{name: "int64", batches: history(i64, num), want: want},
		{name: "int32", batches: history(i32, num), want: want},
		{name: "int8", batches: history(i8, num), want: want},
		{name: "uint8", batches: history(u8, num), want: want},
		{name: "uint32", batches: history(u32, num), want: want},
		{name: "uint64", batches: history(u64, num), want: want},
		{name: "string", batches: history(str, text), want: want},
		{name: "large string", batches: history(lst, text), want: want},
		{name: "float64", batches: history(f64, func(n int) any { return float64(n) / 2 }), want: want},
		{name: "timestamp", batches: history(tsu, num), want: want},
		{name: "int64 upsert inserts", batches: history(i64, num), upsert: true, want: upsert(want)},
		{name: "string upsert inserts", batches: history(str, text), upsert: true, want: upsert(want)},
		{
			name: "composite key: both columns identify the row",
			batches: []batch{{key: []arrow.DataType{i64, str}, rows: []row{
				{I, []any{1, "a"}, "x1"}, {I, []any{1, "b"}, "y1"}, {U, []any{1, "a"}, "x2"}, {I, []any{2, "a"}, "z1"},
			}}},
			want: []survivor{{"x2", U, true}, {"y1", I, false}, {"z1", I, false}},
		},
		{
			// A source widened its key column between batches: 7 is still 7.
			name: "key widened int32 → int64 → uint64 between batches",
			batches: []batch{
				{key: []arrow.DataType{i32}, rows: []row{{I, []any{7}, "a"}, {I, []any{8}, "b"}}},
				{key: []arrow.DataType{i64}, rows: []row{{U, []any{7}, "a2"}}},
				{key: []arrow.DataType{u64}, rows: []row{{D, []any{8}, ""}, {U, []any{7}, "a3"}}},
			},
			want: []survivor{{"a3", U, true}, {"", D, true}},
		},
		{
			name: "key changed from integer to text: 1 and \"1\" are different keys",
			batches: []batch{
				{key: []arrow.DataType{i64}, rows: []row{{I, []any{1}, "int"}}},
				{key: []arrow.DataType{str}, rows: []row{{I, []any{"1"}, "text"}}},
				{key: []arrow.DataType{i32}, rows: []row{{U, []any{1}, "int2"}}},
			},
			want: []survivor{{"int2", U, true}, {"text", I, false}},
		},
		{
			name: "uint64 beyond int64 is not a negative int64",
			batches: []batch{
				{key: []arrow.DataType{i64}, rows: []row{{I, []any{-1}, "neg"}}},
				{key: []arrow.DataType{u64}, rows: []row{{I, []any{uint64(math.MaxUint64)}, "big"}, {U, []any{uint64(math.MaxInt64)}, "max"}}},
				{key: []arrow.DataType{i64}, rows: []row{{I, []any{math.MaxInt64}, "max2"}}},
			},
			want: []survivor{{"neg", I, false}, {"big", I, false}, {"max2", I, true}},
		},
		{
			name: "strings that would collide without a length prefix",
			batches: []batch{{key: []arrow.DataType{str, str}, rows: []row{
				{I, []any{"ab", "c"}, "1"}, {I, []any{"a", "bc"}, "2"},
			}}},
			want: []survivor{{"1", I, false}, {"2", I, false}},
		},
		{
			name: "no key: every row survives in order",
			batches: []batch{
				{rows: []row{{R, nil, "a"}, {I, nil, "a"}}},
				{rows: []row{{I, nil, "b"}}},
			},
			want: []survivor{{"a", R, false}, {"a", I, false}, {"b", I, false}},
		},
		{
			name:    "no key: an update has no row to find",
			batches: []batch{{rows: []row{{I, nil, "a"}, {U, nil, "b"}}}},
			err:     "row 1: update, but the stream has no primary key",
		},
		{
			name:    "no key: a delete has no row to find",
			batches: []batch{{rows: []row{{D, nil, ""}}}},
			err:     "row 0: delete, but the stream has no primary key",
		},
		{
			name:    "null integer key",
			batches: []batch{{key: []arrow.DataType{i64}, rows: []row{{I, []any{1}, "a"}, {I, []any{nil}, "b"}}}},
			err:     "row 1: primary key column k0 is null",
		},
		{
			name:    "null text key",
			batches: []batch{{key: []arrow.DataType{i64, str}, rows: []row{{I, []any{1, nil}, "a"}}}},
			err:     "row 0: primary key column k1 is null",
		},
		{
			name:    "unknown op",
			batches: []batch{{key: []arrow.DataType{i64}, rows: []row{{I, []any{1}, "a"}, {Op(4), []any{2}, "b"}}}},
			err:     "row 1: _skippr_op is 4, not an op",
		},
		{
			name:    "negative op",
			batches: []batch{{key: []arrow.DataType{i64}, rows: []row{{Op(-1), []any{1}, "a"}}}},
			err:     "row 0: _skippr_op is -1, not an op",
		},
		{
			name: "truncate forgets the rows before it, keeps the ones after",
			batches: []batch{
				{key: []arrow.DataType{i64}, rows: []row{{I, []any{1}, "a"}, {I, []any{2}, "b"}}},
				{truncate: true},
				{key: []arrow.DataType{i64}, rows: []row{{I, []any{2}, "b2"}, {I, []any{3}, "c"}, {U, []any{3}, "c2"}}},
			},
			want: []survivor{{"b2", I, false}, {"c2", U, true}},
		},
		{
			name: "truncate then a text key: no integer keys carried over",
			batches: []batch{
				{key: []arrow.DataType{i64}, rows: []row{{I, []any{1}, "a"}}},
				{truncate: true},
				{key: []arrow.DataType{str}, rows: []row{{I, []any{"x"}, "x"}}},
			},
			want: []survivor{{"x", I, false}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFold(FoldOptions{Rows: 4, UpsertInserts: tc.upsert})
			var recs []arrow.RecordBatch
			truncated := false
			var err error
			for _, b := range tc.batches {
				if b.truncate {
					f.Truncate()
					truncated = true
					continue
				}
				rec := build(t, b)
				defer rec.Release()
				var (
					ops []Op
					key *Key
				)
				if ops, err = OpValues(rec); err != nil {
					break
				}
				if key, err = KeyOf(rec); err != nil {
					break
				}
				recs = append(recs, rec)
				if err = f.Add(key, ops); err != nil {
					break
				}
			}
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one containing %q", err, tc.err)
				}
				if !errors.Is(err, fault.ErrData) || fault.FixOf(err) == "" {
					t.Errorf("err %v is not a data error with a fix", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if f.Truncated() != truncated {
				t.Errorf("Truncated() = %v, want %v", f.Truncated(), truncated)
			}
			var got []survivor
			for _, l := range f.Last() {
				rec := recs[l.Batch]
				v := rec.Column(int(rec.NumCols()) - 3).(*array.String).Value(l.Row)
				got = append(got, survivor{v, l.Op, l.Replaces})
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("survivors\n got %v\nwant %v", got, tc.want)
			}
		})
	}
}

// TestOpsNull refuses a null op, which reads as 0 (a snapshot row) if nobody looks.
func TestOpsNull(t *testing.T) {
	sc := Schema([]arrow.Field{{Name: "k", Type: i64}}, []string{"k"})
	rb := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer rb.Release()
	rb.Field(0).(*array.Int64Builder).Append(1)
	rb.Field(1).AppendNull()
	rb.Field(2).AppendNull()
	rec := rb.NewRecordBatch()
	defer rec.Release()
	_, err := OpValues(rec)
	if err == nil || !strings.Contains(err.Error(), "row 0: _skippr_op is null") || !errors.Is(err, fault.ErrData) {
		t.Fatalf("err = %v, want a data error naming the null op", err)
	}
}

// TestKeyOfMissingColumn refuses a key that names a column the batch lacks.
func TestKeyOfMissingColumn(t *testing.T) {
	fields := []arrow.Field{{Name: "k", Type: i64}}
	sc := Schema(fields, []string{"id"})
	rb := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer rb.Release()
	rec := rb.NewRecordBatch()
	defer rec.Release()
	if _, err := KeyOf(rec); err == nil || !strings.Contains(err.Error(), `primary key column "id" is not in the batch`) {
		t.Fatalf("err = %v", err)
	}
}

// TestFoldValues: per key, the newest row that carries values, which a soft-deleting destination keeps when
// the newest row is a delete (plugin-sdk/rowmeta).
func TestFoldValues(t *testing.T) {
	const (
		R = OpRead
		I = OpInsert
		U = OpUpdate
		D = OpDelete
	)
	k := func(n int) []any { return []any{n} }
	cases := []struct {
		name string
		rows []row
		want []string // per surviving key: the value row's v, or "-" when it has none
	}{
		{name: "insert then delete keeps the insert's values", rows: []row{{I, k(1), "a"}, {D, k(1), ""}}, want: []string{"a"}},
		{name: "update then delete keeps the update's", rows: []row{{R, k(1), "a"}, {U, k(1), "b"}, {D, k(1), ""}}, want: []string{"b"}},
		{name: "a key-only delete has none", rows: []row{{D, k(1), ""}}, want: []string{"-"}},
		{name: "re-insert after a delete is the values", rows: []row{{I, k(1), "a"}, {D, k(1), ""}, {I, k(1), "c"}}, want: []string{"c"}},
		{name: "two keys", rows: []row{{D, k(2), ""}, {I, k(1), "a"}, {D, k(1), ""}, {D, k(1), ""}}, want: []string{"-", "a"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := build(t, batch{key: []arrow.DataType{i64}, rows: tc.rows})
			defer rec.Release()
			ops, err := OpValues(rec)
			if err != nil {
				t.Fatal(err)
			}
			key, err := KeyOf(rec)
			if err != nil {
				t.Fatal(err)
			}
			f := NewFold(FoldOptions{})
			if err := f.Add(key, ops); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, l := range f.Last() {
				if !l.HasValues {
					got = append(got, "-")
					continue
				}
				got = append(got, rec.Column(1).(*array.String).Value(l.ValRow))
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("values %v, want %v", got, tc.want)
			}
		})
	}
}
