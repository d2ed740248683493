package query

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/lakequery"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
)

// TestInitialDefaultFillsFilesWithoutTheColumn: columns added after the fixture's data file was written, with
// an initial default in the plan (lakequery.MetaInitialDefault), read that value
// in the rows of that file (text, cast to the column's type); a column without one reads NULL. Without the
// default the rows read NULL.
func TestInitialDefaultFillsFilesWithoutTheColumn(t *testing.T) {
	tp := lakeFixture(t)
	sc, err := protocol.DecodeSchema(memory.DefaultAllocator, tp.ArrowSchema)
	if err != nil {
		t.Fatal(err)
	}
	added := func(name string, dt arrow.DataType, id int, def string) arrow.Field {
		keys, vals := []string{"PARQUET:field_id"}, []string{fmt.Sprint(id)}
		if def != "" {
			keys, vals = append(keys, lakequery.MetaInitialDefault), append(vals, def)
		}
		return arrow.Field{Name: name, Type: dt, Nullable: true, Metadata: arrow.NewMetadata(keys, vals)}
	}
	fields := append(sc.Fields(),
		added("grade", arrow.PrimitiveTypes.Int32, 6, "7"),
		added("label", arrow.BinaryTypes.String, 7, "it's old"),
		added("day", arrow.FixedWidthTypes.Date32, 8, "2020-01-02"),
		added("ok", arrow.FixedWidthTypes.Boolean, 9, "true"),
		added("plain", arrow.PrimitiveTypes.Int64, 10, ""))
	if tp.ArrowSchema, err = protocol.EncodeSchema(memory.DefaultAllocator, arrow.NewSchema(fields, nil)); err != nil {
		t.Fatal(err)
	}
	var in bytes.Buffer
	if _, err := lakequery.NewWriter(&in, lakequery.Request{SQL: "SELECT id, grade, label, day, ok, plain FROM people ORDER BY id", Format: "csv", AsOfLake: true,
		Lakes: []lakequery.Lake{{Pipeline: "p", Plan: lakequery.Plan{Namespace: "lake", Tables: []lakequery.TablePlan{tp}}}}}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if summary, err := Answer(context.Background(), &in, &out, Options{TempDir: t.TempDir()}); err != nil {
		t.Fatalf("%v\n%s", err, summary)
	}
	want := "id,grade,label,day,ok,plain\n1,7,it's old,2020-01-02,true,\n4,7,it's old,2020-01-02,true,\n"
	if out.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", out.String(), want)
	}
}
