package dest

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

// TestRenameTable: a stream the source renamed (change.RenamedFromTableMeta) is carried by renaming its table and
// history table: rows written under the former name stay, changes after the rename land beside them, in a range
// whose earlier entry wrote the former table (the transaction is split before the rename) and in one entry that
// writes the former stream and then renames it (its rows go into the renamed table). The marked schema applied
// again (the table renamed already) changes nothing. Without the rename, the new stream's table starts empty.
func TestRenameTable(t *testing.T) {
	h := newHarness(t, "")
	h.settings = []byte(`{"path": "` + h.path + `", "history": true}`)
	on := func(stream string, it serve.Item) serve.Item { it.Stream = stream; return it }
	at := func(seq uint64, it serve.Item) serve.Item { it.Sequence = seq; return it }
	marked := func(from string) *arrow.Schema { return change.MarkRenamedTable(userSchema, from) }
	schemaOf := func(stream, from string) serve.Item {
		return serve.Item{Stream: stream, Schema: &serve.Stream{Name: stream, Schema: marked(from), PrimaryKey: []string{"id"}}}
	}
	h.apply(1, on("shop.a", batch(t, userSchema, chg{change.OpInsert, 1, "ann"}, chg{change.OpInsert, 2, "bob"}, chg{change.OpInsert, 3, "cy"})))
	toB := []serve.Item{schemaOf("shop.b", "shop.a"),
		on("shop.b", batch(t, marked("shop.a"), chg{change.OpInsert, 4, "dan"}, chg{change.OpDelete, 2, nil}))}
	res, err := h.d.Apply(ctx(t), serve.ApplyRequest{Settings: h.settings, Pipeline: "p", FirstSequence: 2, Sequence: 3, Items: []serve.Item{
		at(2, on("shop.a", batch(t, userSchema, chg{change.OpUpdate, 1, "ann2"}))), at(3, toB[0]), at(3, toB[1])}})
	if err != nil || res.Skipped {
		t.Fatalf("apply 2..3: %+v %v", res, err)
	}
	tables := func(want ...string) {
		t.Helper()
		h.wantRows(`SELECT table_name FROM duckdb_tables() WHERE table_name NOT LIKE '\_skippr%' ESCAPE '\' ORDER BY 1`, want...)
	}
	h.wantRows(`SELECT id, name FROM b ORDER BY id`, "1|ann2", "3|cy", "4|dan")
	tables("b", "b_history")
	h.apply(4, toB...)
	h.wantRows(`SELECT id, name FROM b ORDER BY id`, "1|ann2", "3|cy", "4|dan")
	tables("b", "b_history")

	h.apply(5, on("shop.b", batch(t, marked("shop.a"), chg{change.OpUpdate, 4, "dan2"})), schemaOf("shop.c", "shop.b"),
		on("shop.c", batch(t, marked("shop.b"), chg{change.OpInsert, 5, "eve"})))
	h.wantRows(`SELECT id, name FROM c ORDER BY id`, "1|ann2", "3|cy", "4|dan2", "5|eve")
	tables("c", "c_history")
	// Every change under every name: 3 inserts; an update; an insert and a delete, twice; an update, an insert.
	h.wantRows(`SELECT count(*) FROM c_history`, "10")
	h.wantRows(`SELECT streams FROM _skippr_state`, `{"shop.c":5}`)

	// RENAME TABLE c TO c_old, d TO c in one entry, with rows of c before it and of the new c (d's) after it: the
	// rows before go to c_old, d's table becomes c.
	h.apply(6, on("shop.d", batch(t, userSchema, chg{change.OpInsert, 9, "dee"})))
	h.apply(7, on("shop.c", batch(t, marked("shop.b"), chg{change.OpUpdate, 5, "eve2"})), schemaOf("shop.c_old", "shop.c"),
		schemaOf("shop.c", "shop.d"), on("shop.c", batch(t, marked("shop.d"), chg{change.OpInsert, 10, "ten"})))
	h.wantRows(`SELECT id, name FROM c_old ORDER BY id`, "1|ann2", "3|cy", "4|dan2", "5|eve2")
	h.wantRows(`SELECT id, name FROM c ORDER BY id`, "9|dee", "10|ten")
	tables("c", "c_history", "c_old", "c_old_history")
}
