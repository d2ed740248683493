package rows

import (
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
)

// TestTimePastTheDayIsADataError: PostgreSQL's time takes 24:00:00 (pgtest.TypeMatrix has it), BigQuery's
// TIME ends at 23:59:59.999999. Before, the encoder formatted it as a clock and sent 00:00:00 (found by
// test/e2e's TestTypeMatrixIntoBigQuery); now it is a data error naming the column and the value, and the
// day's last microsecond still encodes.
func TestTimePastTheDayIsADataError(t *testing.T) {
	s := arrow.NewSchema([]arrow.Field{{Name: "t", Type: arrow.FixedWidthTypes.Time64us, Nullable: true}}, nil)
	for _, c := range []struct {
		us        int64
		wantError string // "" when the row encodes
	}{
		{0, ""},
		{86400_000000 - 1, ""},
		{86400_000000, "column t: time 24:00:00.000000 (86400000000 us) is outside BigQuery's TIME range"},
		{-1, "column t: time"},
	} {
		b := array.NewRecordBuilder(memory.DefaultAllocator, s)
		b.Field(0).(*array.Time64Builder).Append(arrow.Time64(c.us))
		rec := b.NewRecordBatch()
		b.Release()
		enc, err := NewEncoder(s, []int{0})
		if err != nil {
			t.Fatal(err)
		}
		_, err = enc.Append(nil, rec, 0, 1, 0)
		rec.Release()
		switch {
		case c.wantError == "" && err != nil:
			t.Fatalf("%d us: want it encoded, got %v", c.us, err)
		case c.wantError == "":
		case err == nil || !strings.Contains(err.Error(), c.wantError) || fault.ClassOf(err) != fault.Data:
			t.Fatalf("%d us: want a data error containing %q, got %v (class %s)", c.us, c.wantError, err, fault.ClassOf(err))
		}
	}
}
