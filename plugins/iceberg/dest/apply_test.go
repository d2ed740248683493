package dest

import (
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/iceberg-go"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

var (
	opR = change.OpRead
	opI = change.OpInsert
	opU = change.OpUpdate
	opD = change.OpDelete
)

// usersSchema has a key, plain columns, a struct and a list.
func usersSchema() *arrow.Schema {
	return change.Schema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "score", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
		{Name: "address", Type: arrow.StructOf(
			arrow.Field{Name: "city", Type: arrow.BinaryTypes.String, Nullable: true},
			arrow.Field{Name: "zip", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
		), Nullable: true},
		{Name: "tags", Type: arrow.ListOf(arrow.BinaryTypes.String), Nullable: true},
	}, []string{"id"})
}

func user(op change.Op, id int, name string) row {
	if op == opD {
		return r(op, id, nil, nil, nil, nil)
	}
	return r(op, id, name, float64(id)/2, map[string]any{"city": "c-" + name, "zip": id * 10}, []any{name, "t" + name})
}

func TestChangesFoldIntoTable(t *testing.T) {
	cases := []struct {
		name    string
		upsert  bool
		version int
		applies [][][]row // applies -> batches -> rows
	}{
		{name: "inserts", applies: [][][]row{{{user(opI, 1, "a"), user(opI, 2, "b"), user(opR, 3, "c")}}}},
		{name: "updates and deletes across applies", applies: [][][]row{
			{{user(opR, 1, "a"), user(opR, 2, "b"), user(opR, 3, "c"), user(opR, 4, "d")}},
			{{user(opU, 1, "a2"), user(opD, 2, ""), user(opI, 5, "e")}},
			{{user(opU, 1, "a3"), user(opU, 5, "e2"), user(opD, 3, "")}},
		}},
		{name: "same key several times in one apply", applies: [][][]row{
			{{user(opI, 1, "a"), user(opU, 1, "a2")}, {user(opU, 1, "a3"), user(opI, 2, "b"), user(opD, 2, "")}},
			{{user(opD, 1, ""), user(opI, 1, "again")}, {user(opI, 3, "c"), user(opU, 3, "c2"), user(opD, 3, ""), user(opI, 3, "c3")}},
		}},
		{name: "delete of an absent key and update of an absent key", applies: [][][]row{
			{{user(opI, 1, "a")}},
			{{user(opD, 9, ""), user(opU, 8, "h")}},
		}},
		{name: "nested values change", applies: [][][]row{
			{{user(opI, 1, "a"), r(opI, 2, "b", nil, nil, nil), r(opI, 3, "c", 1.5, map[string]any{"city": nil, "zip": nil}, []any{})}},
			{{r(opU, 2, "b", nil, map[string]any{"city": "x", "zip": 1}, []any{"p", nil, "q"}), r(opU, 1, "a", nil, nil, nil)}},
		}},
		{name: "format version 3", version: 3, applies: [][][]row{
			{{user(opR, 1, "a"), user(opR, 2, "b"), user(opR, 3, "c")}},
			{{user(opU, 1, "a2"), user(opD, 2, ""), user(opI, 4, "d")}},
		}},
		// A nil batch is a truncate: rows before it in its apply go too, rows after it stay.
		{name: "truncate between rows", applies: [][][]row{
			{{user(opR, 1, "a"), user(opR, 2, "b"), user(opR, 3, "c")}},
			{{user(opU, 1, "a2"), user(opI, 4, "d")}, nil, {user(opI, 1, "z"), user(opI, 5, "e"), user(opU, 5, "e2")}},
			{{user(opU, 1, "z2"), user(opD, 5, "")}},
		}},
		{name: "truncate at the end of an apply, then rows", version: 3, applies: [][][]row{
			{{user(opR, 1, "a"), user(opR, 2, "b")}},
			{{user(opU, 1, "a2")}, nil},
			{{user(opI, 1, "again")}},
		}},
		{name: "upsert inserts replace earlier rows", upsert: true, applies: [][][]row{
			{{user(opR, 1, "a"), user(opR, 2, "b")}},
			{{user(opR, 1, "a2"), user(opI, 2, "b2")}},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			extra := map[string]any{"upsert_inserts": tc.upsert}
			if tc.version != 0 {
				extra["format_version"] = tc.version
			}
			e := newEnv(t, extra)
			sc := usersSchema()
			for i, ap := range tc.applies {
				var its []serve.Item
				if i == 0 {
					its = append(its, schemaItem("users", sc))
				}
				for _, rows := range ap {
					if rows == nil {
						its = append(its, serve.Item{Stream: "users", Truncate: true})
						continue
					}
					its = append(its, items("users", batch(t, sc, rows...))...)
				}
				if res := e.apply(uint64(i+1), its...); res.Skipped {
					t.Fatalf("apply %d skipped", i+1)
				}
				e.check("users", "users", "id")
			}
			if want := max(tc.version, 2); e.table("users").Metadata().Version() != want {
				t.Fatalf("format version %d, want %d", e.table("users").Metadata().Version(), want)
			}
		})
	}
}

// An insert of a key that an earlier apply already holds is an append (as the protocol defines inserts), so
// without upsert_inserts the table holds it twice. This pins that policy down.
func TestInsertOfExistingKeyAppends(t *testing.T) {
	e := newEnv(t, nil)
	sc := usersSchema()
	e.apply(1, items("users", batch(t, sc, user(opI, 1, "a")))...)
	e.apply(2, items("users", batch(t, sc, user(opI, 1, "b")))...)
	at, err := e.table("users").Scan().ToArrowTable(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer at.Release()
	if at.NumRows() != 2 {
		t.Fatalf("got %d rows, want 2 (append without upsert_inserts)", at.NumRows())
	}
}

func TestTableCreatedWithIdentifierFields(t *testing.T) {
	e := newEnv(t, map[string]any{"tables": map[string]any{"users": "people"}})
	e.apply(1, items("users", batch(t, usersSchema(), user(opI, 1, "a")))...)
	tbl := e.table("people")
	sch := tbl.Schema()
	id, ok := sch.FindFieldByName("id")
	if !ok || !id.Required {
		t.Fatalf("id field: %+v, want required", id)
	}
	if len(sch.IdentifierFieldIDs) != 1 || sch.IdentifierFieldIDs[0] != id.ID {
		t.Fatalf("identifier fields %v, want [%d]", sch.IdentifierFieldIDs, id.ID)
	}
	if got := tbl.Metadata().Version(); got != 2 {
		t.Fatalf("format version %d, want 2", got)
	}
	for _, f := range sch.Fields() {
		if strings.HasPrefix(f.Name, change.ReservedPrefix) {
			t.Fatalf("reserved column %s in the table", f.Name)
		}
	}
	if got := tbl.Properties()[propStream]; got != "users" {
		t.Fatalf("%s = %q", propStream, got)
	}
	snap := tbl.CurrentSnapshot()
	if snap == nil || snap.Summary == nil || snap.Summary.Properties[seqKey("p1")] != "1" {
		t.Fatalf("snapshot summary lacks %s=1: %+v", seqKey("p1"), snap)
	}
	if _, ok := sch.FindFieldByName("address.zip"); !ok {
		t.Fatalf("nested field address.zip missing: %s", sch)
	}
	if _, ok := sch.FindTypeByName("tags"); !ok {
		t.Fatal("list column tags missing")
	}
	if typ, _ := sch.FindTypeByName("address.zip"); !typ.Equals(iceberg.PrimitiveTypes.Int32) {
		t.Fatalf("address.zip is %s", typ)
	}
}

// A delete row carries only its key, even where the table's other columns are required.
func TestDeleteInTableWithRequiredColumns(t *testing.T) {
	e := newEnv(t, nil)
	sc := change.Schema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "name", Type: arrow.BinaryTypes.String},
	}, []string{"id"})
	e.apply(1, items("t", batch(t, sc, r(opI, 1, "a"), r(opI, 2, "b")))...)
	e.apply(2, items("t", batch(t, sc, r(opD, 1, nil), r(opU, 2, "b2")))...)
	e.check("t", "t", "id")
	// A row that would be written with a null in a required column is refused, naming it.
	_, err := e.d.Apply(ctxT(t), serve.ApplyRequest{Settings: e.raw, Pipeline: e.pipeline, Sequence: 3, Items: items("t", batch(t, sc, r(opU, 2, nil)))})
	if err == nil || !strings.Contains(err.Error(), "column name is required but 1 rows hold null") {
		t.Fatalf("err = %v", err)
	}
}
