package query

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/lakequery"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
	"github.com/skippr-dev/skippr/plugin-sdk/rowmeta"
)

// softDeleteFixture is a soft-deleting destination's table: ann live, bob flagged deleted, cy written before
// the column was added (NULL: live).
func softDeleteFixture(t *testing.T) lakequery.TablePlan {
	t.Helper()
	data := filepath.Join(t.TempDir(), "data.parquet")
	db, err := sql.Open("duckdb", "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	q := fmt.Sprintf(`COPY (SELECT * FROM (VALUES (1::BIGINT, 'ann', false), (2, 'bob', true), (3, 'cy', NULL)) v(id, name, %s))
		TO '%s' (FORMAT parquet, FIELD_IDS {id: 1, name: 2, %s: 3})`, rowmeta.Deleted, data, rowmeta.Deleted)
	if _, err := db.Exec(q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	id := func(f arrow.Field, n int) arrow.Field {
		f.Metadata = arrow.NewMetadata([]string{"PARQUET:field_id"}, []string{fmt.Sprint(n)})
		return f
	}
	sc := arrow.NewSchema([]arrow.Field{
		id(arrow.Field{Name: "id", Type: arrow.PrimitiveTypes.Int64}, 1),
		id(arrow.Field{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true}, 2),
		id(arrow.Field{Name: rowmeta.Deleted, Type: arrow.FixedWidthTypes.Boolean, Nullable: true}, 3),
	}, nil)
	schemaIPC, err := protocol.EncodeSchema(memory.DefaultAllocator, sc)
	if err != nil {
		t.Fatal(err)
	}
	return lakequery.TablePlan{
		Stream: "public.people", Name: "lake.people", Table: "people", Exists: true, Fence: 2, Key: []string{"id"},
		ArrowSchema: schemaIPC,
		Files:       []lakequery.PlanFile{{Path: data, Location: "file://" + data, Rows: 3}},
	}
}

// TestQuerySoftDeleted: a table with _skippr_deleted shows only the rows not flagged deleted, unless
// include_deleted; a delete still in the WAL hides its row either way, and the WAL's new rows show.
func TestQuerySoftDeleted(t *testing.T) {
	for _, c := range []struct {
		name                     string
		asOfLake, includeDeleted bool
		want                     string
	}{
		{"default", false, false, "id,name,_skippr_deleted\n1,ann,false\n4,dan,\n"},
		{"include deleted", false, true, "id,name,_skippr_deleted\n1,ann,false\n2,bob,true\n4,dan,\n"},
		{"as of lake", true, false, "id,name,_skippr_deleted\n1,ann,false\n3,cy,\n"},
		{"as of lake, include deleted", true, true, "id,name,_skippr_deleted\n1,ann,false\n2,bob,true\n3,cy,\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var in bytes.Buffer
			w, err := lakequery.NewWriter(&in, lakequery.Request{SQL: "SELECT id, name, _skippr_deleted FROM lake.people ORDER BY id", Format: "csv",
				AsOfLake: c.asOfLake, IncludeDeleted: c.includeDeleted,
				Lakes: []lakequery.Lake{{Pipeline: "p", Plan: lakequery.Plan{Namespace: "lake", Tables: []lakequery.TablePlan{softDeleteFixture(t)}}}}})
			if err != nil {
				t.Fatal(err)
			}
			w.Entry("p", 3)
			if err := w.Batch("public.people", 2, walBatch(t, walRow{change.OpDelete, 3, "", ""}, walRow{change.OpInsert, 4, "dan", ""})); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if _, err := Answer(context.Background(), &in, &out, Options{TempDir: t.TempDir()}); err != nil {
				t.Fatal(err)
			}
			if out.String() != c.want {
				t.Fatalf("got\n%s\nwant\n%s", out.String(), c.want)
			}
		})
	}
}
