package main

import (
	"context"
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

// keyBatch is a batch of a stream whose only column is its key.
func keyBatch(t *testing.T, stream string, ids ...int64) client.ApplyItem {
	t.Helper()
	sc := change.Schema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}}, []string{"id"})
	b := change.NewBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	for _, id := range ids {
		b.Field(0).(*array.Int64Builder).Append(id)
		b.Row(change.OpRead, "")
	}
	rec := b.NewBatch()
	defer rec.Release()
	ipc, err := protocol.EncodeRecord(memory.DefaultAllocator, rec)
	if err != nil {
		t.Fatal(err)
	}
	return client.ApplyItem{Batch: &protocol.Batch{Stream: stream, SchemaID: protocol.SchemaID(sc), Rows: rec.NumRows(), IPC: ipc}}
}

func mark(stream string, end bool) client.ApplyItem {
	return client.ApplyItem{Resnapshot: &pluginv2.ResnapshotMark{Stream: stream, End: end}}
}

// TestApplyResnapshot: between a begin and an end mark spread over several applies, the destination keeps the
// rows it received (also rows rewritten with equal values, and rows of a table whose only column is its key) and
// at the end removes the others — rows it held from before, and a row written behind skippr's back — in the
// end's apply.
func TestApplyResnapshot(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	dst := startPlugin(t)
	set := settings(db, map[string]any{"schema": "out"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	apply := func(seq uint64, items ...client.ApplyItem) {
		t.Helper()
		if _, err := dst.Apply(ctx, set, "p", seq, items); err != nil {
			t.Fatalf("apply %d: %v", seq, err)
		}
	}
	key := []string{"id"}
	kv := func(id int64, v string) kvRow { return kvRow{op: change.OpRead, id: id, v: v} }
	caps, err := dst.Capabilities(ctx, set)
	if err != nil || !caps.Resnapshot {
		t.Fatalf("capabilities %v %v: want resnapshot", caps, err)
	}
	apply(1, kvBatch(t, "public.kv", false, key, kv(1, "a"), kv(2, "b"), kv(3, "c")), keyBatch(t, "public.k", 1, 2, 3))
	db.Exec(t, `INSERT INTO out.kv VALUES (4, 'stray'); INSERT INTO out.k VALUES (4)`)
	apply(2, mark("public.kv", false), mark("public.k", false), kvBatch(t, "public.kv", false, key, kv(1, "a")), keyBatch(t, "public.k", 1))
	apply(3, kvBatch(t, "public.kv", false, key, kv(2, "b2"), kvRow{op: change.OpDelete, id: 1}, kv(1, "a1")), keyBatch(t, "public.k", 2),
		mark("public.kv", true), mark("public.k", true))
	if got := strings.Join(rowsText(t, db, "out.kv"), " "); got != "(1,a1) (2,b2)" {
		t.Errorf("out.kv = %s, want (1,a1) (2,b2)", got)
	}
	if got := strings.Join(rowsText(t, db, "out.k"), " "); got != "(1) (2)" {
		t.Errorf("out.k = %s, want (1) (2)", got)
	}
	// An end without a begin (its begin was applied before the destination was reset) removes nothing.
	apply(4, mark("public.kv", true))
	if got := strings.Join(rowsText(t, db, "out.kv"), " "); got != "(1,a1) (2,b2)" {
		t.Errorf("out.kv = %s after an end without a begin", got)
	}
}
