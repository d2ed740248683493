package values

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

func TestIntervalsAsStruct(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
	defer mem.AssertSize(t, 0)
	b := array.NewMonthDayNanoIntervalBuilder(mem)
	defer b.Release()
	b.Append(arrow.MonthDayNanoInterval{Months: -14, Days: 3, Nanoseconds: 86_400_000_000_001})
	b.AppendNull()
	b.Append(arrow.MonthDayNanoInterval{})
	in := b.NewMonthDayNanoIntervalArray()
	defer in.Release()
	out := IntervalsAsStruct(mem, in, IntervalStruct).(*array.Struct)
	defer out.Release()
	for i, want := range []string{`{"days":3,"months":-14,"nanoseconds":86400000000001}`, "null", `{"days":0,"months":0,"nanoseconds":0}`} {
		got := "null"
		if out.IsValid(i) {
			got = out.ValueStr(i)
		}
		if got != want {
			t.Errorf("row %d: %s, want %s", i, got, want)
		}
	}
}
