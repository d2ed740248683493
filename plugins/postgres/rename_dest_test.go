package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/client"
	pluginv2 "github.com/skippr-dev/skippr/plugin-sdk/proto/skippr/plugin/v2"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// TestDestRenameColumn: columns the source renamed (change.RenamedFromMeta), the key among them, are renamed
// with ALTER TABLE … RENAME COLUMN, so rows written before keep their values under the new names; rows of the
// old schema in the same apply land there too; a replayed sequence is skipped, and the same changes applied
// again under a new one (the table renamed already) leave the table as it is. Without the marker the table
// gains uid and full_name beside id and name, and the old rows have NULL there.
func TestDestRenameColumn(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	dst := startPlugin(t)
	set := settings(db, map[string]any{"schema": "out"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	old := change.Schema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "name", Type: arrow.BinaryTypes.String, Nullable: true}}, []string{"id"})
	renamed := change.Schema([]arrow.Field{
		change.MarkRenamed(arrow.Field{Name: "uid", Type: arrow.PrimitiveTypes.Int64}, "id"),
		change.MarkRenamed(arrow.Field{Name: "full_name", Type: arrow.BinaryTypes.String, Nullable: true}, "name"),
	}, []string{"uid"})
	type ch struct {
		op   change.Op
		id   int64
		name string
	}
	batch := func(sc *arrow.Schema, rows ...ch) client.ApplyItem {
		b := change.NewBuilder(memory.DefaultAllocator, sc)
		defer b.Release()
		for _, r := range rows {
			b.Field(0).(*array.Int64Builder).Append(r.id)
			b.Field(1).(*array.StringBuilder).Append(r.name)
			b.Row(r.op, "")
		}
		rec := b.NewBatch()
		defer rec.Release()
		ipc, err := protocol.EncodeRecord(memory.DefaultAllocator, rec)
		if err != nil {
			t.Fatal(err)
		}
		return client.ApplyItem{Batch: &protocol.Batch{Stream: "public.users", SchemaID: protocol.SchemaID(sc), Rows: rec.NumRows(), IPC: ipc}}
	}
	schemaItem := func(sc *arrow.Schema) client.ApplyItem {
		raw, err := protocol.EncodeSchema(memory.DefaultAllocator, sc)
		if err != nil {
			t.Fatal(err)
		}
		return client.ApplyItem{Schema: &pluginv2.Stream{Name: "public.users", ArrowSchema: raw, PrimaryKey: change.PrimaryKey(sc), SchemaId: protocol.SchemaID(sc)}}
	}
	apply := func(seq uint64, items ...client.ApplyItem) bool {
		t.Helper()
		r, err := dst.ApplyRange(ctx, set, "p", seq, seq, slices.Values(items))
		if err != nil {
			t.Fatalf("apply %d: %v", seq, err)
		}
		return r.Skipped
	}
	second := func(op4 change.Op) []client.ApplyItem {
		return []client.ApplyItem{
			batch(old, ch{change.OpUpdate, 3, "cy2"}),
			schemaItem(renamed),
			batch(renamed, ch{op4, 4, "dan"}, ch{change.OpUpdate, 2, "bob2"}),
		}
	}
	check := func(after string) {
		t.Helper()
		conn := db.Connect(t)
		var cols string
		if err := conn.QueryRow(ctx, `SELECT string_agg(attname, ',' ORDER BY attnum) FROM pg_attribute
			WHERE attrelid = 'out.users'::regclass AND attnum > 0 AND NOT attisdropped`).Scan(&cols); err != nil {
			t.Fatal(err)
		}
		if cols != "uid,full_name" {
			t.Errorf("after %s: columns %s, want uid,full_name", after, cols)
		}
		if got := strings.Join(rowsText(t, db, "out.users"), " "); got != "(1,ann) (2,bob2) (3,cy2) (4,dan)" {
			t.Errorf("after %s: out.users = %s", after, got)
		}
	}
	apply(1, schemaItem(old), batch(old, ch{change.OpInsert, 1, "ann"}, ch{change.OpInsert, 2, "bob"}, ch{change.OpInsert, 3, "cy"}))
	apply(2, second(change.OpInsert)...)
	check("the rename")
	if !apply(2, second(change.OpInsert)...) {
		t.Error("apply 2 again is not skipped")
	}
	apply(3, second(change.OpUpdate)...)
	check("the rename applied twice")
}
