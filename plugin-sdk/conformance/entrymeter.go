package conformance

import (
	"fmt"
	"iter"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

// EntryMeter checks that a destination holds one WAL entry of a range at a time, not the range: it yields a
// range's items the way the SDK does (each record released once the next item is asked for) and records the
// bytes of records alive whenever it makes a new one. A test gives Items to the destination's Apply (through
// serve.NewRange) or ApplyStream, then calls Check.
//
// Each entry updates keys 0..PerEntry-1 of a table whose first column is the int64 key and second a string;
// entry e sets the string to 64 x's and "-e", so after the range every row ends in "-Entries".
type EntryMeter struct {
	Entries, PerEntry int
	mem               *memory.CheckedAllocator
	peak, one         int
}

// NewEntryMeter meters a range of entries entries of perEntry rows each.
func NewEntryMeter(entries, perEntry int) *EntryMeter {
	return &EntryMeter{Entries: entries, PerEntry: perEntry, mem: memory.NewCheckedAllocator(memory.NewGoAllocator())}
}

// Items yields the range's items for stream, whose schema sc is a change schema (change.Schema) of an int64
// key and a string column.
func (m *EntryMeter) Items(sc *arrow.Schema, stream string) iter.Seq2[serve.Item, error] {
	return func(yield func(serve.Item, error) bool) {
		for e := 1; e <= m.Entries; e++ {
			b := change.NewBuilder(m.mem, sc)
			for i := range m.PerEntry {
				b.Field(0).(*array.Int64Builder).Append(int64(i))
				b.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("%s-%d", strings.Repeat("x", 64), e))
				b.Row(change.OpUpdate, "")
			}
			rec := b.NewBatch()
			b.Release()
			if e == 1 {
				m.one = m.mem.CurrentAlloc()
			}
			m.peak = max(m.peak, m.mem.CurrentAlloc())
			ok := yield(serve.Item{Stream: stream, Record: rec, Sequence: uint64(e)}, nil)
			rec.Release()
			if !ok {
				return
			}
		}
	}
}

// Check fails t if a record leaked or if more than the entry being read and the one before it (written when
// its end arrives) were alive at once.
func (m *EntryMeter) Check(t testing.TB) {
	t.Helper()
	m.mem.AssertSize(t, 0)
	if m.peak > 2*m.one+m.one/2 {
		t.Fatalf("records alive peaked at %d bytes, %.1f entries of %d bytes: the range is held, not one entry", m.peak, float64(m.peak)/float64(m.one), m.one)
	}
	t.Logf("peak %d bytes of records alive; one entry %d bytes", m.peak, m.one)
}
