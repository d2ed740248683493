package lake

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

// BenchmarkApply measures applies of 100k-row batches (id, two strings, an int) into a local warehouse:
// inserts (append only) and updates (equality deletes plus new rows).
func BenchmarkApply(b *testing.B) {
	const rows = 100_000
	sc := change.Schema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "email", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "n", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	}, []string{"id"})
	mk := func(op change.Op) arrow.RecordBatch {
		bld := change.NewBuilder(memory.DefaultAllocator, sc)
		defer bld.Release()
		for i := 0; i < rows; i++ {
			bld.Field(0).(*array.Int64Builder).Append(int64(i))
			bld.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("name-%d", i))
			bld.Field(2).(*array.StringBuilder).Append(fmt.Sprintf("user%d@example.com", i))
			bld.Field(3).(*array.Int64Builder).Append(int64(i * 7))
			bld.Row(op, "")
		}
		return bld.NewBatch()
	}
	for _, op := range []change.Op{change.OpInsert, change.OpUpdate} {
		b.Run(op.String(), func(b *testing.B) {
			rec := mk(op)
			defer rec.Release()
			raw, _ := json.Marshal(map[string]any{"catalog": map[string]any{"warehouse": filepath.Join(b.TempDir(), "wh")}})
			d := &Destination{}
			defer d.Close()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				_, err := d.Apply(b.Context(), serve.ApplyRequest{Settings: raw, Pipeline: "bench", Sequence: uint64(i + 1), Items: []serve.Item{{Stream: "t", Record: rec}}})
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(rows*b.N)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}
