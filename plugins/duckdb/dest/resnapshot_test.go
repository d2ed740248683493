package dest

import (
	"errors"
	"strings"
	"testing"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

func mark(stream string, m serve.ResnapshotMark) serve.Item {
	return serve.Item{Stream: stream, Resnapshot: m}
}

// TestResnapshotRemovesRowsNotReceived: between a begin and an end mark (in different applies, and with rows of
// the same apply before the begin), the rows whose key did not arrive are deleted at the end, and only those; a
// replayed end mark changes nothing; a second begin while one is open keeps the first.
func TestResnapshotRemovesRowsNotReceived(t *testing.T) {
	h := newHarness(t, "")
	users := func(rows ...chg) serve.Item { return batch(t, userSchema, rows...) }
	h.apply(1, users(chg{change.OpInsert, 1, "a"}, chg{change.OpInsert, 2, "b"}, chg{change.OpInsert, 3, "c"},
		chg{change.OpInsert, 4, "d"}, chg{change.OpInsert, 5, "e"}))
	// 2 is written before the begin in the same apply: it counts as old.
	h.apply(2, users(chg{change.OpUpdate, 2, "b2"}), mark("public.users", serve.ResnapshotBegin),
		users(chg{change.OpRead, 1, "a"}))
	h.wantRows(`SELECT stream, begin_sequence FROM _skippr_resnapshot`, "public.users|2")
	h.apply(3, mark("public.users", serve.ResnapshotBegin), // asked again: the open one stays
		users(chg{change.OpRead, 3, "c"}, chg{change.OpDelete, 4, nil}, chg{change.OpInsert, 6, "f"}))
	h.wantRows(`SELECT stream, begin_sequence FROM _skippr_resnapshot`, "public.users|2")
	end := []serve.Item{users(chg{change.OpRead, 6, "f"}), mark("public.users", serve.ResnapshotEnd),
		users(chg{change.OpInsert, 7, "g"})}
	h.apply(4, end...)
	// 2 and 5 did not arrive since the begin; 7 came after the end and is kept anyway.
	h.wantRows(`SELECT id, name FROM users ORDER BY id`, "1|a", "3|c", "6|f", "7|g")
	h.wantRows(`SELECT count(*) FROM _skippr_resnapshot`, "0")
	h.wantRows(`SELECT count(*) FROM duckdb_tables() WHERE table_name LIKE '_skippr_resnapshot_keys%'`, "0")

	// The end's apply replayed after a crash, and a stray end with no begin, delete nothing.
	if res := h.apply(4, end...); !res.Skipped {
		t.Fatalf("replayed end: %+v", res)
	}
	h.apply(5, mark("public.users", serve.ResnapshotEnd))
	h.wantRows(`SELECT id, name FROM users ORDER BY id`, "1|a", "3|c", "6|f", "7|g")

	// A re-snapshot that receives nothing (the source's table is empty) empties the table; a failed apply
	// holding an end leaves the table and the begin as they were.
	h.apply(6, mark("public.users", serve.ResnapshotBegin))
	_, err := h.d.Apply(ctx(t), serve.ApplyRequest{Settings: h.settings, Pipeline: "p", Sequence: 7, Items: []serve.Item{
		mark("public.users", serve.ResnapshotEnd), {Stream: "public.users"}}})
	if err == nil {
		t.Fatal("an apply with an empty item succeeded")
	}
	h.wantRows(`SELECT id FROM users ORDER BY id`, "1", "3", "6", "7")
	h.wantRows(`SELECT stream, begin_sequence FROM _skippr_resnapshot`, "public.users|6")
	h.apply(7, mark("public.users", serve.ResnapshotEnd))
	h.wantRows(`SELECT count(*) FROM users`, "0")
}

// TestResnapshotOfKeylessStream: a keyless stream cannot say which rows arrived: the apply fails as a data
// error naming the fix, and nothing is written.
func TestResnapshotOfKeylessStream(t *testing.T) {
	h := newHarness(t, "")
	keyless := change.Schema(userSchema.Fields()[:2], nil)
	_, err := h.d.Apply(ctx(t), serve.ApplyRequest{Settings: h.settings, Pipeline: "p", Sequence: 1, Items: []serve.Item{
		mark("public.users", serve.ResnapshotBegin), batch(t, keyless, chg{change.OpRead, 1, "a"})}})
	if !errors.Is(err, fault.ErrData) || !strings.Contains(err.Error(), "no primary key") {
		t.Fatalf("keyless re-snapshot: %v", err)
	}
}
