package source

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"vitess.io/vitess/go/mysql/binlog"
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
	t, err := def.build("snap", "bench.snap", false)
	if err != nil {
		b.Fatal(err)
	}
	rows := make([][][]byte, 10000)
	for i := range rows {
		rows[i] = [][]byte{
			fmt.Appendf(nil, "%d", i+1),
			fmt.Appendf(nil, "name-%d", i+1),
			fmt.Appendf(nil, "%d.%02d", i%10000, i%100),
			[]byte("2026-12-04 01:40:05.123456"),
			fmt.Appendf(nil, `{"k": %d, "tag": "bench"}`, i%100),
			fmt.Appendf(nil, "%d", i%2),
		}
	}
	r := &reader{cfg: config.Settings{ZeroDate: config.ZeroDateError}, mem: mempool.New()}
	b.ReportAllocs()
	b.ResetTimer()
	for n := 0; n < b.N; n += len(rows) {
		rb := r.newBatch(t)
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

// BenchmarkStreamCells is the stream's per-row decoding cost in the plugin: binlog cells of the bench's
// six-column table (bench/mysql.go) into an Arrow batch of 10000 rows, by the direct decoder (direct) and,
// for comparison, by vitess's text form parsed back (text: what every cell took before).
func BenchmarkStreamCells(b *testing.B) {
	text := &querypb.Field{Type: querypb.Type_VARCHAR}
	cols := []Column{
		{Name: "id", Kind: KindInt64, field: &querypb.Field{Type: querypb.Type_INT64}},
		{Name: "name", Kind: KindString, field: text},
		{Name: "amount", Kind: KindDecimal128, Precision: 12, Scale: 2, field: &querypb.Field{Type: querypb.Type_DECIMAL}},
		{Name: "at", Kind: KindDatetime, field: text},
		{Name: "doc", Kind: KindJSON, field: text},
		{Name: "flag", Kind: KindInt8, field: &querypb.Field{Type: querypb.Type_INT64}},
	}
	types := []byte{binlog.TypeLongLong, binlog.TypeVarchar, binlog.TypeNewDecimal, binlog.TypeDateTime2, binlog.TypeBlob, binlog.TypeTiny}
	metas := []uint16{0, 160, 12<<8 | 2, 6, 4, 0}
	fields := make([]arrow.Field, len(cols))
	for i := range cols {
		fields[i] = arrow.Field{Name: cols[i].Name, Type: cols[i].Kind.Arrow(cols[i]), Nullable: true}
	}
	schema := arrow.NewSchema(fields, nil)
	rows := make([][][]byte, 10000)
	for i := range rows {
		name := fmt.Appendf(nil, "name-%d", i+1)
		doc := fmt.Appendf(nil, `{"k": %d, "tag": "bench"}`, i%100)
		rows[i] = [][]byte{
			binary.LittleEndian.AppendUint64(nil, uint64(i+1)),
			append([]byte{byte(len(name))}, name...),
			encDecimal(int64(i%1000000), 12, 2),
			encDatetime2([6]int{2026, 12, 4, 1, 40, 5}, 123456, 6),
			append(binary.LittleEndian.AppendUint32(nil, uint32(len(doc))), doc...),
			{byte(i % 2)},
		}
	}
	mem := mempool.New()
	for _, direct := range []bool{true, false} {
		name := "direct"
		if !direct {
			name = "text"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for n := 0; n < b.N; n += len(rows) {
				rb := array.NewRecordBuilder(mem, schema)
				rb.Reserve(len(rows))
				for _, row := range rows {
					for c := range cols {
						var err error
						if direct {
							err = appendCell(rb.Field(c), &cols[c], types[c], metas[c], row[c], false)
						} else {
							v, _, cerr := binlog.CellValue(row[c], 0, types[c], metas[c], cols[c].field, false)
							if cerr != nil {
								b.Fatal(cerr)
							}
							err = appendValue(rb.Field(c), &cols[c], v.Raw(), true, false)
						}
						if err != nil {
							b.Fatal(err)
						}
					}
				}
				rb.NewRecordBatch().Release()
				rb.Release()
			}
		})
	}
}
