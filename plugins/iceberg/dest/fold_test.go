package dest

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/rowmeta"
)

// TestFold checks the fold of one apply's rows for every kind of key index: a single integer key of each width
// (hashed as int64), and string and composite keys (hashed as encoded bytes). Each case runs over two batches,
// so a key's last version may sit in either.
func TestFold(t *testing.T) {
	const (
		opR = change.OpRead
		opI = change.OpInsert
		opU = change.OpUpdate
		opD = change.OpDelete
	)
	type in struct {
		op  change.Op
		key []any
		v   string
	}
	// The same history for every key type: keys 1..5 in the first batch, changes in the second.
	history := [][]in{
		{{opR, []any{1}, "a1"}, {opI, []any{2}, "b1"}, {opI, []any{3}, "c1"}, {opR, []any{4}, "d1"}, {opI, []any{5}, "e1"}},
		{{opU, []any{2}, "b2"}, {opD, []any{3}, ""}, {opD, []any{4}, ""}, {opI, []any{4}, "d2"}, {opI, []any{6}, "f1"}, {opU, []any{2}, "b3"}, {opI, []any{5}, "e2"}},
	}
	// Survivors in first-seen key order (1, 2, 4, 5, 6 — 3 is deleted), and the keys needing a delete.
	wantData := []string{"a1", "b3", "d2", "e2", "f1"}
	wantDel := []any{2, 3, 4}
	wantUpsertDel := []any{1, 2, 3, 4, 5, 6}

	cases := []struct {
		name   string
		key    []arrow.DataType
		upsert bool
	}{
		{"int64", []arrow.DataType{arrow.PrimitiveTypes.Int64}, false},
		{"int32", []arrow.DataType{arrow.PrimitiveTypes.Int32}, false},
		{"int16", []arrow.DataType{arrow.PrimitiveTypes.Int16}, false},
		{"int8", []arrow.DataType{arrow.PrimitiveTypes.Int8}, false},
		{"string", []arrow.DataType{arrow.BinaryTypes.String}, false},
		{"composite", []arrow.DataType{arrow.PrimitiveTypes.Int64, arrow.BinaryTypes.String}, false},
		{"int64 upsert inserts", []arrow.DataType{arrow.PrimitiveTypes.Int64}, true},
		{"string upsert inserts", []arrow.DataType{arrow.BinaryTypes.String}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var fields []arrow.Field
			for i, dt := range tc.key {
				fields = append(fields, arrow.Field{Name: "k" + string(rune('0'+i)), Type: dt})
			}
			keyIdx := make([]int, len(fields))
			for i := range keyIdx {
				keyIdx[i] = i
			}
			keySchema := arrow.NewSchema(fields, nil)
			sc := arrow.NewSchema(append(fields, arrow.Field{Name: "v", Type: arrow.BinaryTypes.String, Nullable: true}), nil)
			var obs []opBatch
			for _, rows := range history {
				b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
				var ops []change.Op
				for _, r := range rows {
					for i := range tc.key {
						n := r.key[0].(int)
						switch fb := b.Field(i).(type) {
						case *array.Int64Builder:
							fb.Append(int64(n))
						case *array.Int32Builder:
							fb.Append(int32(n))
						case *array.Int16Builder:
							fb.Append(int16(n))
						case *array.Int8Builder:
							fb.Append(int8(n))
						case *array.StringBuilder:
							fb.Append("key-" + string(rune('0'+n)))
						}
					}
					b.Field(len(tc.key)).(*array.StringBuilder).Append(r.v)
					ops = append(ops, r.op)
				}
				rec := b.NewRecordBatch()
				b.Release()
				t.Cleanup(rec.Release)
				obs = append(obs, opBatch{rec: rec, ops: ops})
			}
			fo, err := fold(context.Background(), memory.DefaultAllocator, obs, keyIdx, keySchema, tc.upsert, rowmeta.Options{}, "test")
			if err != nil {
				t.Fatal(err)
			}
			defer fo.release()
			if fo.rows != 12 {
				t.Errorf("rows = %d, want 12", fo.rows)
			}
			var gotData []string
			for _, r := range fo.data {
				col := r.Column(len(tc.key)).(*array.String)
				for i := 0; i < col.Len(); i++ {
					gotData = append(gotData, col.Value(i))
				}
			}
			// Survivors come batch by batch: a1 is the only one left in the first batch.
			if !reflect.DeepEqual(gotData, wantData) {
				t.Errorf("data rows %v, want %v", gotData, wantData)
			}
			var gotDel []any
			for _, r := range fo.deletes {
				if r.NumCols() != int64(len(tc.key)) {
					t.Fatalf("delete batch has %d columns, want the %d key columns", r.NumCols(), len(tc.key))
				}
				for i := 0; i < int(r.NumRows()); i++ {
					var v any
					b, _ := json.Marshal(r.Column(0).GetOneForMarshal(i))
					if err := json.Unmarshal(b, &v); err != nil {
						t.Fatal(err)
					}
					if s, ok := v.(string); ok {
						v = int(s[len(s)-1] - '0')
					} else {
						v = int(v.(float64))
					}
					gotDel = append(gotDel, v)
				}
			}
			want := wantDel
			if tc.upsert {
				want = wantUpsertDel
			}
			if !reflect.DeepEqual(gotDel, want) {
				t.Errorf("deleted keys %v, want %v", gotDel, want)
			}
		})
	}
}

// TestFoldNullKey refuses a null key on both key paths, naming the stream, batch, row and column.
func TestFoldNullKey(t *testing.T) {
	for _, dt := range []arrow.DataType{arrow.PrimitiveTypes.Int64, arrow.BinaryTypes.String} {
		t.Run(dt.String(), func(t *testing.T) {
			sc := arrow.NewSchema([]arrow.Field{{Name: "k", Type: dt, Nullable: true}}, nil)
			b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
			b.Field(0).AppendNull()
			rec := b.NewRecordBatch()
			b.Release()
			defer rec.Release()
			_, err := fold(context.Background(), memory.DefaultAllocator, []opBatch{{rec: rec, ops: []change.Op{change.OpInsert}}}, []int{0}, sc, false, rowmeta.Options{}, "stream s")
			if err == nil || err.Error() != "stream s: batch 0: row 0: primary key column k is null" {
				t.Fatalf("err = %v, want the null key named", err)
			}
		})
	}
}
