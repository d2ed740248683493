package gen

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
)

func TestGeneratorDeterministicAndReleased(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	s := settings{Seed: 3, BatchSize: 100, Stream: "events", Nested: true, UpdateRatio: 0.3, DeleteRatio: 0.1}
	g1, g2 := newGenerator(s, mem), newGenerator(s, mem)
	defer g1.release()
	defer g2.release()
	a := g1.batch(0, 1000)
	defer a.Release()
	// The same events read as two halves from another generator equal one read.
	b1, b2 := g2.batch(0, 400), g2.batch(400, 600)
	defer b1.Release()
	defer b2.Release()
	s1, s2 := a.NewSlice(0, 400), a.NewSlice(400, 1000)
	defer s1.Release()
	defer s2.Release()
	if !array.RecordEqual(s1, b1) || !array.RecordEqual(s2, b2) {
		t.Fatal("events differ between reads of the same seed")
	}
	ops, err := change.Ops(a)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[change.Op]int{}
	for i := 0; i < ops.Len(); i++ {
		counts[change.Op(ops.Value(i))]++
	}
	for _, op := range []change.Op{change.OpInsert, change.OpUpdate, change.OpDelete} {
		if counts[op] == 0 {
			t.Errorf("no %s among 1000 events with update 0.3, delete 0.1: %v", op, counts)
		}
	}
}

func TestParseSettings(t *testing.T) {
	for _, tc := range []struct {
		in      string
		wantErr bool
	}{
		{`{}`, false},
		{`{"rows": 10, "update_ratio": 0.5, "delete_ratio": 0.5}`, false},
		{`{"update_ratio": 0.7, "delete_ratio": 0.5}`, true},
		{`{"batch_size": 0}`, true},
		{`{"stream": ""}`, true},
		{`{"rowz": 1}`, true},
	} {
		_, err := parseSettings([]byte(tc.in))
		if (err != nil) != tc.wantErr {
			t.Errorf("%s: err = %v, want error %v", tc.in, err, tc.wantErr)
		}
	}
}
