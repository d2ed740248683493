package dest

import (
	"errors"
	"reflect"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

func ordersSchema() *arrow.Schema {
	return change.Schema([]arrow.Field{
		{Name: "order_id", Type: arrow.BinaryTypes.String},
		{Name: "qty", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	}, []string{"order_id"})
}

func snapshotID(e *env, name string) int64 {
	if s := e.table(name).CurrentSnapshot(); s != nil {
		return s.SnapshotID
	}
	return 0
}

func (e *env) lastApplied() serve.Applied {
	e.t.Helper()
	a, err := e.d.LastApplied(ctxT(e.t), e.raw, e.pipeline)
	if err != nil {
		e.t.Fatalf("last applied: %v", err)
	}
	return a
}

// applyUsersAndOrders applies sequence 1 (users and orders inserted) and 2 (a user updated, one deleted)
// and returns them by sequence, to be replayed.
func applyUsersAndOrders(t *testing.T, e *env) map[uint64][]serve.Item {
	t.Helper()
	us, os := usersSchema(), ordersSchema()
	one := []serve.Item{
		{Stream: "users", Record: batch(t, us, user(opI, 1, "a"), user(opI, 2, "b"))},
		{Stream: "orders", Record: batch(t, os, r(opI, "o1", 3))},
	}
	if res := e.apply(1, one...); res.Skipped || res.Rows != 3 {
		t.Fatalf("apply 1: %+v", res)
	}
	two := []serve.Item{{Stream: "users", Record: batch(t, us, user(opU, 1, "a2"), user(opD, 2, ""))}}
	e.apply(2, two...)
	return map[uint64][]serve.Item{1: one, 2: two}
}

// replayIsSkipped applies every sequence of applied again: each must be skipped, the tables' snapshots must
// not move, and the tables must still hold what the first applies left.
func replayIsSkipped(t *testing.T, e *env, applied map[uint64][]serve.Item) {
	t.Helper()
	before := map[string]int64{"users": snapshotID(e, "users"), "orders": snapshotID(e, "orders")}
	for seq, its := range applied {
		if res := e.apply(seq, its...); !res.Skipped {
			t.Fatalf("apply %d again: not skipped", seq)
		}
	}
	after := map[string]int64{"users": snapshotID(e, "users"), "orders": snapshotID(e, "orders")}
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("replay changed the tables: snapshots %v -> %v", before, after)
	}
	e.check("users", "users", "id")
	e.check("orders", "orders", "order_id")
}

func TestReplayOfAppliedSequenceIsSkipped(t *testing.T) {
	e := newEnv(t, nil)
	replayIsSkipped(t, e, applyUsersAndOrders(t, e))
	a := e.lastApplied()
	if a.Sequence != 2 || a.Streams["users"] != 2 || a.Streams["orders"] != 1 {
		t.Fatalf("last applied %+v, want sequence 2, users 2, orders 1", a)
	}
	// Another pipeline into the same tables starts from zero and does not disturb p1's fences.
	e.pipeline = "p2"
	if a := e.lastApplied(); a.Sequence != 0 || len(a.Streams) != 0 {
		t.Fatalf("p2 last applied %+v, want nothing", a)
	}
}

var errCrash = errors.New("simulated crash")

// A crash after some of an apply's table commits: LastApplied must not claim the sequence, and the replay
// must apply exactly the missing tables.
func TestCrashBetweenTableCommits(t *testing.T) {
	// The tables of an apply commit in parallel: a crash leaves any subset of them committed. The hooks stop
	// orders either before its commit (users committed alone) or after it (both did, the marker did not).
	cases := []struct {
		name                    string
		crashBefore, crashAfter string // the table whose commit the crash precedes or follows
		wantSkip                bool   // the replay finds every table done
	}{
		{name: "after one table, before the other", crashBefore: "orders"},
		{name: "after both tables, before the marker", crashAfter: "orders", wantSkip: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, nil)
			us, os := usersSchema(), ordersSchema()
			e.apply(1,
				serve.Item{Stream: "users", Record: batch(t, us, user(opI, 1, "a"), user(opI, 2, "b"))},
				serve.Item{Stream: "orders", Record: batch(t, os, r(opI, "o1", 1), r(opI, "o2", 2))})
			two := []serve.Item{
				{Stream: "users", Record: batch(t, us, user(opU, 1, "a2"), user(opD, 2, ""), user(opI, 3, "c"))},
				{Stream: "orders", Record: batch(t, os, r(opD, "o1", nil), r(opU, "o2", 20))},
			}
			e.d.hooks.beforeCommit = func(tbl string, _ int) error {
				if tbl == tc.crashBefore {
					return errCrash
				}
				return nil
			}
			e.d.hooks.afterCommit = func(tbl string) error {
				if tbl == tc.crashAfter {
					return errCrash
				}
				return nil
			}
			_, err := e.d.Apply(ctxT(t), serve.ApplyRequest{Settings: e.raw, Pipeline: e.pipeline, Sequence: 2, Items: two})
			if !errors.Is(err, errCrash) {
				t.Fatalf("apply 2: %v, want the simulated crash", err)
			}
			// A new process starts.
			e.d.Close()
			e.d = &Destination{Version: "test", Log: testLogger(t)}
			t.Cleanup(func() { e.d.Close() })
			a := e.lastApplied()
			if a.Sequence != 1 {
				t.Fatalf("after the crash LastApplied = %d, want 1 (apply 2 is incomplete)", a.Sequence)
			}
			if a.Streams["users"] != 2 {
				t.Fatalf("users fence %d, want 2", a.Streams["users"])
			}
			usersSnap := snapshotID(e, "users")
			res := e.apply(2, two...)
			if res.Skipped != tc.wantSkip {
				t.Fatalf("replay of 2: skipped=%v, want %v", res.Skipped, tc.wantSkip)
			}
			if res.Skipped {
				e.fold(two...) // the crashed attempt did apply everything
			}
			if got := snapshotID(e, "users"); got != usersSnap {
				t.Fatalf("users was committed again on replay (snapshot %d -> %d)", usersSnap, got)
			}
			e.check("users", "users", "id")
			e.check("orders", "orders", "order_id")
			if a := e.lastApplied(); a.Sequence != 2 || a.Streams["orders"] != 2 {
				t.Fatalf("after the replay LastApplied = %+v, want 2 everywhere", a)
			}
			if res := e.apply(2, two...); !res.Skipped {
				t.Fatal("third apply of 2 not skipped")
			}
		})
	}
}

// An apply without items still moves LastApplied: the engine reclaims WAL entries by it.
func TestEmptyApplyIsRecorded(t *testing.T) {
	e := newEnv(t, nil)
	if res := e.apply(1); res.Skipped {
		t.Fatal("empty apply 1 skipped")
	}
	if res := e.apply(1); !res.Skipped {
		t.Fatal("empty apply 1 again not skipped")
	}
	if a := e.lastApplied(); a.Sequence != 1 {
		t.Fatalf("last applied %d, want 1", a.Sequence)
	}
}
