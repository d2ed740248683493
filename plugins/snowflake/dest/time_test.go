package dest

import (
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

// TestTimePastTheDayIsADataError: PostgreSQL's time takes 24:00:00 (pgtest.TypeMatrix has it), Snowflake's
// TIME ends at 23:59:59.999999999. The value stops the apply with a data error naming the column, the row and
// the value, and nothing of the apply is written; before, it reached the COPY, where the stand-in (as a clock
// would) loaded it as 00:00:00 (found by test/e2e's TestTypeMatrixIntoSnowflake). On the stand-in, or live.
func TestTimePastTheDayIsADataError(t *testing.T) {
	tg := newTarget(t, nil)
	st := tg.stream("public.clock")
	s := change.Schema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "t", Type: arrow.FixedWidthTypes.Time64us, Nullable: true},
	}, []string{"id"})
	mk := func(id int64, us int64) arrow.RecordBatch {
		b := change.NewBuilder(mem, s)
		defer b.Release()
		b.Field(0).(*array.Int64Builder).Append(id)
		b.Field(1).(*array.Time64Builder).Append(arrow.Time64(us))
		b.Row(change.OpInsert, "")
		return b.NewBatch()
	}
	last := mk(1, 86400_000000-1) // 23:59:59.999999
	defer last.Release()
	tg.apply(1, 1, item(st, 1, last))
	for i, c := range []struct {
		us   int64
		want string
	}{
		{86400_000000, "column t: row 0: time 24:00:00.000000000 is outside"},
		{-1, "column t: row 0: time"},
	} {
		rec := mk(int64(10+i), c.us)
		_, err := tg.d.Apply(tctx(t), serve.ApplyRequest{Settings: tg.settings, Pipeline: tg.pipeline, FirstSequence: uint64(2 + i), Sequence: uint64(2 + i), Items: []serve.Item{item(st, uint64(2+i), rec)}})
		rec.Release()
		if err == nil || !strings.Contains(err.Error(), c.want) || fault.ClassOf(err) != fault.Data {
			t.Fatalf("case %d: want a data error containing %q, got %v (class %s)", i, c.want, err, fault.ClassOf(err))
		}
	}
	got := tg.rows(TableName(st))
	if len(got) != 1 {
		t.Fatalf("%d rows, want only 23:59:59.999999: %v", len(got), got)
	}
}
