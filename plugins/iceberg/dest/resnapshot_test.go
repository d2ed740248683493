package dest

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

func mark(stream string, m serve.ResnapshotMark) serve.Item {
	return serve.Item{Stream: stream, Resnapshot: m}
}

// ids returns the keys a table holds, sorted; the scan (env.rows) fails the test on a key held twice.
func (e *env) ids(name string) []string {
	e.t.Helper()
	return slices.Sorted(func(yield func(string) bool) {
		for k := range e.rows(name, "id") {
			if !yield(k) {
				return
			}
		}
	})
}

func (e *env) wantIDs(name string, want ...string) {
	e.t.Helper()
	if got := e.ids(name); !slices.Equal(got, want) {
		e.t.Fatalf("table %s holds %v, want %v", name, got, want)
	}
}

func (e *env) resnapProp(name string) string {
	return e.table(name).Properties()[resnapKey(e.pipeline)]
}

// TestResnapshotRemovesRowsNotReceived: between a begin and an end mark in different applies, the rows whose key
// did not arrive are removed at the end, in the end's commit, and only those; rows sent again are not doubled;
// another stream is untouched; a compaction inside the bracket changes nothing; an end whose commit failed
// leaves everything for its replay, and the replay of a committed end is skipped. Each case runs with the apply
// buffered whole, with every batch spilled as a chunk of its own, and with the end's keys diffed on disk.
func TestResnapshotRemovesRowsNotReceived(t *testing.T) {
	for _, tc := range []struct {
		name                string
		spilled, keysOnDisk bool
	}{{"buffered", false, false}, {"spilled", true, false}, {"keys diffed on disk", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, nil)
			if tc.spilled {
				e.d.hooks.bufferBudget = 1
			}
			if tc.keysOnDisk {
				e.d.hooks.resnapBudget, e.d.hooks.spillDir = 1, t.TempDir()
			}
			us, os := usersSchema(), ordersSchema()
			users := func(rows ...row) serve.Item { return serve.Item{Stream: "users", Record: batch(t, us, rows...)} }
			e.apply(1, users(user(opI, 1, "a"), user(opI, 2, "b"), user(opI, 3, "c"), user(opI, 4, "d"), user(opI, 5, "e")),
				serve.Item{Stream: "orders", Record: batch(t, os, r(opI, "o1", 1))})
			// The begin's apply: its rows count as received (the begin is the table's state before the commit).
			e.apply(2, users(user(opU, 2, "b2")), mark("users", serve.ResnapshotBegin), users(user(opR, 1, "a")))
			if e.resnapProp("users") == "" {
				t.Fatal("the begin left no property")
			}
			begin := e.resnapProp("users")
			e.apply(3, mark("users", serve.ResnapshotBegin), // asked again: the open one stays
				users(user(opR, 3, "c"), user(opD, 4, ""), user(opI, 6, "f")),
				serve.Item{Stream: "orders", Record: batch(t, os, r(opI, "o2", 2))})
			if got := e.resnapProp("users"); got != begin {
				t.Fatalf("a second begin moved the property from %s to %s", begin, got)
			}
			// A compaction inside the bracket rewrites old and new rows into files of its own.
			// Its snapshot expiry waits for the end: those snapshots say which rows arrived.
			if res, err := Compact(ctxT(t), e.raw, "users", CompactOptions{MinInputFiles: 1, ExpireOlderThan: time.Nanosecond, RetainLast: 1}); err != nil || res.ExpiryHeldBy != resnapKey(e.pipeline) {
				t.Fatalf("compaction inside a re-snapshot: %+v, %v", res, err)
			}
			e.wantIDs("users", "1", "2", "3", "5", "6")

			end := []serve.Item{users(user(opR, 6, "f")), mark("users", serve.ResnapshotEnd), users(user(opI, 7, "g"))}
			// The end's commit fails once (a crash before the catalog took it): nothing changes.
			e.d.hooks.beforeCommit = func(tbl string, _ int) error {
				if tbl == "users" {
					return errors.New("injected: crash before the commit")
				}
				return nil
			}
			if _, err := e.d.Apply(ctxT(t), serve.ApplyRequest{Settings: e.raw, Pipeline: e.pipeline, Sequence: 4, Items: end}); err == nil {
				t.Fatal("the apply with a failing commit succeeded")
			}
			e.d.hooks.beforeCommit = nil
			e.wantIDs("users", "1", "2", "3", "5", "6")
			if e.resnapProp("users") != begin {
				t.Fatal("a failed end changed the begin property")
			}
			snap := snapshotID(e, "users")
			e.apply(4, end...)
			// 5 did not arrive since the begin; 7 came after the end; 4 was deleted.
			e.wantIDs("users", "1", "2", "3", "6", "7")
			if got := e.rows("orders", "order_id"); len(got) != 2 {
				t.Fatalf("orders holds %v, want o1 and o2", got)
			}
			if p := e.resnapProp("users"); p != "" {
				t.Fatalf("the end left the property %s", p)
			}
			if tbl := e.table("users"); tbl.CurrentSnapshot().ParentSnapshotID == nil || *tbl.CurrentSnapshot().ParentSnapshotID != snap {
				t.Fatalf("the end took more than one snapshot: %d after %d", tbl.CurrentSnapshot().SnapshotID, snap)
			}
			// Row by row: the removal left the other rows as the changes made them.
			delete(e.expected["users"], "5")
			e.check("users", "users", "id")

			// The end's apply again (a replay after a crash past its commit), and a stray end: nothing moves.
			if res := e.apply(4, end...); !res.Skipped {
				t.Fatalf("replayed end: %+v", res)
			}
			e.apply(5, mark("users", serve.ResnapshotEnd))
			e.wantIDs("users", "1", "2", "3", "6", "7")

			// A bracket within one apply: only the rows between its marks count, also against a row the same apply
			// wrote before the begin (spilled: in an earlier chunk), and one written after the end stays.
			e.apply(6, users(user(opU, 2, "b3"), user(opI, 8, "h")), mark("users", serve.ResnapshotBegin),
				users(user(opR, 1, "a"), user(opR, 3, "c")), mark("users", serve.ResnapshotEnd), users(user(opI, 9, "i")))
			e.wantIDs("users", "1", "3", "9")
			// A re-snapshot that receives nothing (the source's table is empty) empties the table.
			e.apply(7, mark("users", serve.ResnapshotBegin))
			e.apply(8, mark("users", serve.ResnapshotEnd))
			e.wantIDs("users")
			// A re-snapshot of a stream without a table creates none.
			e.apply(9, mark("nothing", serve.ResnapshotBegin), mark("nothing", serve.ResnapshotEnd))
			if _, err := e.catalog().cat.LoadTable(ctxT(t), []string{"lake", "nothing"}); err == nil {
				t.Fatal("marks created a table")
			}
		})
	}
}

// TestResnapshotOfKeylessStream: a keyless stream cannot say which rows arrived: the apply fails as a data error
// naming the fix, and nothing is written.
func TestResnapshotOfKeylessStream(t *testing.T) {
	e := newEnv(t, nil)
	keyless := change.Schema(usersSchema().Fields()[:2], nil)
	e.apply(1, serve.Item{Stream: "logs", Record: batch(t, keyless, r(opI, 1, "a"))})
	snap := snapshotID(e, "logs")
	_, err := e.d.Apply(ctxT(t), serve.ApplyRequest{Settings: e.raw, Pipeline: e.pipeline, Sequence: 2, Items: []serve.Item{
		mark("logs", serve.ResnapshotBegin), {Stream: "logs", Record: batch(t, keyless, r(opR, 1, "a"))}}})
	if !errors.Is(err, fault.ErrData) || !strings.Contains(err.Error(), "no primary key") {
		t.Fatalf("keyless re-snapshot: %v", err)
	}
	if snapshotID(e, "logs") != snap {
		t.Fatal("the refused apply committed")
	}
}

// TestResnapshotPartitionedAndREST: the end's equality deletes reach the rows not received in every partition —
// scoped when the table is partitioned by its key, global (spec 0) when by a non-key column, also for a row the
// copy moved to another partition — and the begin property is set and removed on a REST catalog (SeaweedFS) as
// on the embedded one.
func TestResnapshotPartitionedAndREST(t *testing.T) {
	cases := []struct {
		name string
		env  func(t *testing.T) *env
	}{
		{"day of a non-key column", func(t *testing.T) *env {
			return newEnv(t, map[string]any{"partitions": map[string]any{"events": []string{"day(ts)"}}})
		}},
		{"bucket of the key", func(t *testing.T) *env {
			return newEnv(t, map[string]any{"partitions": map[string]any{"events": []string{"bucket(4, id)"}}})
		}},
		{"rest catalog", func(t *testing.T) *env { return newRESTEnv(t, "", nil) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := tc.env(t)
			sc := eventsSchema()
			events := func(rows ...row) serve.Item { return serve.Item{Stream: "events", Record: batch(t, sc, rows...)} }
			e.apply(1, events(dayEvent(opI, 1, 1, "eu", 10), dayEvent(opI, 2, 1, "eu", 20), dayEvent(opI, 3, 2, "us", 30),
				dayEvent(opI, 4, 2, "us", 40), dayEvent(opI, 5, 3, "eu", 50), dayEvent(opI, 6, 3, "us", 60)))
			e.apply(2, mark("events", serve.ResnapshotBegin), events(dayEvent(opR, 1, 4, "eu", 11)))
			if e.resnapProp("events") == "" {
				t.Fatal("the begin left no property")
			}
			e.apply(3, events(dayEvent(opR, 3, 2, "us", 30), dayEvent(opD, 4, 0, "", 0)))
			e.apply(4, events(dayEvent(opR, 5, 3, "eu", 50)), mark("events", serve.ResnapshotEnd))
			if p := e.resnapProp("events"); p != "" {
				t.Fatalf("the end left the property %s", p)
			}
			for _, k := range []string{"2", "6"} {
				delete(e.expected["events"], k)
			}
			e.check("events", "events", "id")
			if got := e.ids("events"); !slices.Equal(got, []string{"1", "3", "5"}) {
				t.Fatalf("events holds %v", got)
			}
		})
	}
}
