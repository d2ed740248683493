package change

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
)

// frow is a change row of a stream matched by full row: an int column a and a text column b (nil: NULL).
type frow struct {
	op Op
	a  any
	b  any
}

func (r frow) String() string { return fmt.Sprintf("%s(%v,%v)", r.op, r.a, r.b) }

// fullRowBatch builds a batch of rows; nil rows means a truncate at that point in the tests.
func fullRowBatch(t *testing.T, rows []frow) arrow.RecordBatch {
	t.Helper()
	sc := WithFullRow(Schema([]arrow.Field{
		{Name: "a", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "b", Type: arrow.BinaryTypes.String, Nullable: true},
	}, nil))
	b := NewBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	for _, r := range rows {
		if r.a == nil {
			b.Field(0).AppendNull()
		} else {
			b.Field(0).(*array.Int64Builder).Append(int64(r.a.(int)))
		}
		if r.b == nil {
			b.Field(1).AppendNull()
		} else {
			b.Field(1).(*array.StringBuilder).Append(r.b.(string))
		}
		b.Row(r.op, "")
	}
	return b.NewBatch()
}

func TestFoldFullRow(t *testing.T) {
	x := func(op Op) frow { return frow{op, 1, "x"} }
	tests := []struct {
		name    string
		batches [][]frow // nil: a truncate
		want    []frow
		err     error
	}{
		{name: "inserts kept in order, duplicates too",
			batches: [][]frow{{x(OpInsert), x(OpInsert), {OpRead, 2, nil}}},
			want:    []frow{x(OpInsert), x(OpInsert), {OpRead, 2, nil}}},
		{name: "a delete cancels one of two equal inserts",
			batches: [][]frow{{x(OpInsert), x(OpInsert), x(OpDelete)}},
			want:    []frow{x(OpInsert)}},
		{name: "a delete before the insert goes to the table",
			batches: [][]frow{{x(OpDelete), x(OpInsert)}},
			want:    []frow{x(OpDelete), x(OpInsert)}},
		{name: "an update as delete and insert over a row the table holds",
			batches: [][]frow{{x(OpDelete), {OpInsert, 1, "y"}}, {{OpDelete, 1, "y"}, {OpInsert, 1, "z"}}},
			want:    []frow{x(OpDelete), {OpInsert, 1, "z"}}},
		{name: "NULL equals NULL",
			batches: [][]frow{{{OpInsert, 1, nil}, {OpInsert, nil, nil}}, {{OpDelete, 1, nil}, {OpDelete, nil, nil}}},
			want:    nil},
		{name: "NULL is not the empty string",
			batches: [][]frow{{{OpInsert, 1, nil}, {OpDelete, 1, ""}}},
			want:    []frow{{OpInsert, 1, nil}, {OpDelete, 1, ""}}},
		{name: "a truncate forgets the inserts a delete could cancel",
			batches: [][]frow{{x(OpInsert)}, nil, {x(OpDelete), x(OpInsert), x(OpDelete)}},
			want:    []frow{x(OpDelete)}},
		{name: "more deletes than inserts",
			batches: [][]frow{{x(OpInsert), x(OpDelete), x(OpDelete), x(OpInsert), x(OpInsert), x(OpDelete)}},
			want:    []frow{x(OpDelete), x(OpInsert)}},
		{name: "an update is refused",
			batches: [][]frow{{x(OpUpdate)}},
			err:     fault.ErrData},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := NewPlan("s", FoldOptions{FullRow: true})
			defer p.Release()
			var err error
			for _, rows := range tc.batches {
				if rows == nil {
					p.Fold.Truncate()
					continue
				}
				rec := fullRowBatch(t, rows)
				err = p.Add(rec)
				rec.Release()
				if err != nil {
					break
				}
			}
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("err = %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []frow
			for _, l := range p.Fold.Last() {
				rec := p.Batches[l.Batch]
				if !l.HasValues || l.ValBatch != l.Batch || l.ValRow != l.Row {
					t.Fatalf("%+v: want the row's own values", l)
				}
				r := frow{op: l.Op}
				if a := rec.Column(0).(*array.Int64); a.IsValid(l.Row) {
					r.a = int(a.Value(l.Row))
				}
				if b := rec.Column(1).(*array.String); b.IsValid(l.Row) {
					r.b = b.Value(l.Row)
				}
				got = append(got, r)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// A destination that does not apply full row streams refuses one instead of writing its deletes as rows.
func TestFoldFullRowRefusedWithoutOption(t *testing.T) {
	for _, opt := range []FoldOptions{{}, {UpsertInserts: true}} {
		p := NewPlan("s", opt)
		rec := fullRowBatch(t, []frow{{OpDelete, 1, "x"}})
		err := p.Add(rec)
		rec.Release()
		p.Release()
		if !errors.Is(err, fault.ErrConfig) {
			t.Fatalf("%+v: err = %v, want a config fault", opt, err)
		}
	}
}

// Without the mark a keyless stream still refuses deletes (mode: append's inserts only).
func TestFullRowMark(t *testing.T) {
	sc := Schema([]arrow.Field{{Name: "a", Type: arrow.PrimitiveTypes.Int64}}, nil)
	if FullRow(sc) {
		t.Fatal("an unmarked schema is full row")
	}
	m := WithFullRow(sc)
	if !FullRow(m) || !FullRow(WithFullRow(m)) || len(PrimaryKey(m)) != 0 {
		t.Fatalf("WithFullRow: %s", m)
	}
	if v, _ := m.Metadata().GetValue(MatchMeta); v != MatchFullRow || m.Metadata().Len() != 2 {
		t.Fatalf("metadata %v", m.Metadata())
	}
}
