package source

import (
	"fmt"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"vitess.io/vitess/go/sqltypes"
	querypb "vitess.io/vitess/go/vt/proto/query"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/mempool"
	"github.com/skippr-dev/skippr/plugins/mysql/config"
)

// BenchmarkAppendRow is the snapshot's per-row cost in the plugin: text values of the bench's six-column
// table (bench/mysql.go) into an Arrow batch of 10000 rows.
func BenchmarkAppendRow(b *testing.B) {
	def := TableDef{Columns: []ColumnDef{
		{Name: "id", DataType: "bigint", ColumnType: "bigint(20)"},
		{Name: "name", DataType: "varchar", ColumnType: "varchar(40)", Charset: "utf8mb4"},
		{Name: "amount", DataType: "decimal", ColumnType: "decimal(12,2)", Precision: 12, Scale: 2},
		{Name: "at", DataType: "datetime", ColumnType: "datetime(6)", Scale: 6},
		{Name: "doc", DataType: "json", ColumnType: "json"},
		{Name: "flag", DataType: "tinyint", ColumnType: "tinyint(1)"},
	}, Key: []string{"id"}}
	t, err := def.build("snap", "bench.snap")
	if err != nil {
		b.Fatal(err)
	}
	rows := make([][]sqltypes.Value, 10000)
	for i := range rows {
		rows[i] = []sqltypes.Value{
			sqltypes.MakeTrusted(querypb.Type_INT64, fmt.Appendf(nil, "%d", i+1)),
			sqltypes.MakeTrusted(querypb.Type_VARCHAR, fmt.Appendf(nil, "name-%d", i+1)),
			sqltypes.MakeTrusted(querypb.Type_DECIMAL, fmt.Appendf(nil, "%d.%02d", i%10000, i%100)),
			sqltypes.MakeTrusted(querypb.Type_DATETIME, []byte("2026-12-04 01:40:05.123456")),
			sqltypes.MakeTrusted(querypb.Type_JSON, fmt.Appendf(nil, `{"k": %d, "tag": "bench"}`, i%100)),
			sqltypes.MakeTrusted(querypb.Type_INT8, fmt.Appendf(nil, "%d", i%2)),
		}
	}
	r := &reader{cfg: config.Settings{ZeroDate: config.ZeroDateError}, mem: mempool.New()}
	b.ReportAllocs()
	b.ResetTimer()
	for n := 0; n < b.N; n += len(rows) {
		rb := array.NewRecordBuilder(r.mem, t.Schema)
		rb.Reserve(len(rows))
		for _, row := range rows {
			if err := r.appendRow(rb, t, row, change.OpRead, ""); err != nil {
				b.Fatal(err)
			}
		}
		rb.NewRecordBatch().Release()
		rb.Release()
	}
}
