package dest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/plugins/postgres/dest"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestApplyHoldsOneEntry applies a range of many entries, releasing each record once the next item is asked
// for (as the SDK does), and measures the bytes of records alive whenever a new one is made: the destination
// may keep the entry it is reading, not the range (README, Memory). The table must then hold each key's last
// change.
func TestApplyHoldsOneEntry(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := pgtest.NewDB(t)
	raw, _ := json.Marshal(map[string]any{"host": db.Server.Host, "port": db.Server.Port, "user": "postgres", "database": db.Name, "sslmode": "disable"})
	x, err := dest.New().Open(ctx, raw)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	sc := change.Schema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "v", Type: arrow.BinaryTypes.String}}, []string{"id"})
	const entries, perEntry = 30, 300
	var peak, one int
	items := func(yield func(serve.Item, error) bool) {
		for e := 1; e <= entries; e++ {
			b := change.NewBuilder(mem, sc)
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
			ok := yield(serve.Item{Stream: "public.events", Record: rec, Sequence: uint64(e)}, nil)
			rec.Release()
			if !ok {
				return
			}
		}
	}
	r := serve.NewRange(serve.ApplyRequest{Pipeline: "p", FirstSequence: 1, Sequence: entries}, items)
	if _, err := x.Apply(ctx, r); err != nil {
		t.Fatal(err)
	}
	mem.AssertSize(t, 0)
	// The entry being read and the one before it (written when its End arrives) may be alive.
	if peak > 2*one+one/2 {
		t.Fatalf("records alive peaked at %d bytes, %.1f entries of %d bytes: the range is held, not one entry", peak, float64(peak)/float64(one), one)
	}
	var n int
	var last string
	db.QueryRow(t, []any{&n, &last}, `SELECT count(*), min(v) FROM public.events`)
	if n != perEntry || !strings.HasSuffix(last, fmt.Sprintf("-%d", entries)) {
		t.Fatalf("%d rows, smallest value %q; want %d rows, each the last change (…-%d)", n, last, perEntry, entries)
	}
	t.Logf("peak %d bytes of records alive; one entry %d bytes", peak, one)
}
