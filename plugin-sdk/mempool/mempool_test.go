package mempool

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

var _ memory.Allocator = (*Allocator)(nil)

func TestAllocate(t *testing.T) {
	for _, tc := range []struct {
		size, wantCap int
	}{
		{0, 64}, {1, 64}, {64, 64}, {65, 128}, {1000, 1024}, {1 << 20, 1 << 20}, {1<<20 + 1, 2 << 20},
		{1<<28 + 1, 1<<28 + 1}, // past the largest class: a plain allocation
	} {
		t.Run(fmt.Sprint(tc.size), func(t *testing.T) {
			a := New()
			b := a.Allocate(tc.size)
			if len(b) != tc.size || cap(b) != tc.wantCap {
				t.Fatalf("Allocate(%d): len %d cap %d, want len %d cap %d", tc.size, len(b), cap(b), tc.size, tc.wantCap)
			}
		})
	}
}

// A freed buffer comes back zeroed, whoever used it before: Arrow's builders rely on zeroed validity bitmaps.
func TestReusedBuffersAreZeroed(t *testing.T) {
	a := New()
	for i := range 100 {
		b := a.Allocate(1000 + i%7)
		if !bytes.Equal(b, make([]byte, len(b))) {
			t.Fatalf("round %d: Allocate returned a dirty buffer", i)
		}
		for j := range b[:cap(b)] {
			b[:cap(b)][j] = 0xff
		}
		a.Free(b)
	}
}

func TestReallocate(t *testing.T) {
	a := New()
	b := a.Allocate(10)
	copy(b, "0123456789")
	b[:cap(b)][20] = 0xff // garbage past len, within cap: growing in place must clear it
	b = a.Reallocate(30, b)
	if string(b[:10]) != "0123456789" || !bytes.Equal(b[10:], make([]byte, 20)) {
		t.Fatalf("grown in place: %q", b)
	}
	b = a.Reallocate(5000, b)
	if len(b) != 5000 || cap(b) != 8192 || string(b[:10]) != "0123456789" || !bytes.Equal(b[10:], make([]byte, 4990)) {
		t.Fatalf("grown by copy: len %d cap %d %q", len(b), cap(b), b[:12])
	}
	if b = a.Reallocate(100, b); len(b) != 100 || string(b[:10]) != "0123456789" {
		t.Fatalf("shrunk: len %d %q", len(b), b[:10])
	}
}

// Buffers of other allocators, or not of a pooled capacity, are left to the collector rather than handed out.
func TestFreeIgnoresForeignBuffers(t *testing.T) {
	a := New()
	a.Free(make([]byte, 100, 100))
	a.Free(make([]byte, 10, 32))
	for range 10 {
		if b := a.Allocate(100); cap(b) != 128 {
			t.Fatalf("Allocate(100) returned cap %d: a foreign buffer came back", cap(b))
		}
	}
}

// The snapshot's pattern: build a batch, send it, release it, build the next in the same buffers. Every batch
// must read back exactly what was appended, nulls included, however its buffers were used before.
func TestBatchesBuiltFromReusedBuffers(t *testing.T) {
	a := New()
	checked := memory.NewCheckedAllocator(a)
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "flag", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
	}, nil)
	b := array.NewRecordBuilder(checked, sc)
	for round := range 20 {
		n := 1000 + round*37
		for i := range n {
			id, name, flag := b.Field(0).(*array.Int64Builder), b.Field(1).(*array.StringBuilder), b.Field(2).(*array.BooleanBuilder)
			if (i+round)%5 == 0 {
				id.AppendNull()
				name.AppendNull()
				flag.AppendNull()
				continue
			}
			id.Append(int64(round*100000 + i))
			name.Append(fmt.Sprintf("row-%d-%d", round, i))
			flag.Append((i+round)%3 == 0)
		}
		rec := b.NewRecordBatch()
		ids, names, flags := rec.Column(0).(*array.Int64), rec.Column(1).(*array.String), rec.Column(2).(*array.Boolean)
		for i := range n {
			null := (i+round)%5 == 0
			if ids.IsNull(i) != null || names.IsNull(i) != null || flags.IsNull(i) != null {
				t.Fatalf("round %d row %d: null %v/%v/%v, want %v", round, i, ids.IsNull(i), names.IsNull(i), flags.IsNull(i), null)
			}
			if null {
				continue
			}
			if ids.Value(i) != int64(round*100000+i) || names.Value(i) != fmt.Sprintf("row-%d-%d", round, i) || flags.Value(i) != ((i+round)%3 == 0) {
				t.Fatalf("round %d row %d: got %d %q %v", round, i, ids.Value(i), names.Value(i), flags.Value(i))
			}
		}
		rec.Release()
	}
	b.Release()
	checked.AssertSize(t, 0)
}
