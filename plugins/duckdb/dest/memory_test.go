package dest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

// TestApplyHoldsOneEntry applies a range of many entries, releasing each record once the next item is asked
// for (as the SDK does), and measures the bytes of records alive whenever a new one is made: the destination
// may keep the entry it is reading, not the range (README, Memory). The table must then hold each key's last
// change.
func TestApplyHoldsOneEntry(t *testing.T) {
	h := newHarness(t, "")
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	const entries, perEntry = 30, 300
	var peak, one int
	items := func(yield func(serve.Item, error) bool) {
		for e := 1; e <= entries; e++ {
			b := change.NewBuilder(mem, userSchema)
			for i := range perEntry {
				b.Field(0).(*array.Int64Builder).Append(int64(i))
				b.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("%s-%d", strings.Repeat("x", 64), e))
				b.Row(change.OpUpdate, "")
			}
			rec := b.NewBatch()
			b.Release()
			if e == 1 {
				one = mem.CurrentAlloc()
			}
			peak = max(peak, mem.CurrentAlloc())
			ok := yield(serve.Item{Stream: "public.users", Record: rec, Sequence: uint64(e)}, nil)
			rec.Release()
			if !ok {
				return
			}
		}
	}
	req := serve.ApplyRequest{Settings: h.settings, Pipeline: "p", FirstSequence: 1, Sequence: entries}
	if _, err := h.d.ApplyStream(ctx(t), req, items); err != nil {
		t.Fatal(err)
	}
	mem.AssertSize(t, 0)
	// The entry being read and the one before it (written when its End arrives) may be alive.
	if peak > 2*one+one/2 {
		t.Fatalf("records alive peaked at %d bytes, %.1f entries of %d bytes: the range is held, not one entry", peak, float64(peak)/float64(one), one)
	}
	h.wantRows(fmt.Sprintf(`SELECT count(*), min(name) LIKE '%%-%d' FROM users`, entries), fmt.Sprintf("%d|true", perEntry))
	t.Logf("peak %d bytes of records alive; one entry %d bytes", peak, one)
}
