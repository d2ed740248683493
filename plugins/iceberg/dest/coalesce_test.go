package dest

import (
	"errors"
	"testing"

	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

// applyRange applies items as the range first..last; want lists the items expected to change the tables (the
// rest lie below a fence), which are folded into the expected state.
func (e *env) applyRange(first, last uint64, items []serve.Item, want ...serve.Item) (serve.ApplyResult, error) {
	e.t.Helper()
	res, err := e.d.Apply(ctxT(e.t), serve.ApplyRequest{Settings: e.raw, Pipeline: e.pipeline, FirstSequence: first, Sequence: last, Items: items})
	if err == nil {
		e.fold(want...)
	}
	return res, err
}

func snapshots(e *env, name string) int { return len(e.table(name).Metadata().Snapshots()) }

// tagged sets the entry every item came from.
func tagged(seq uint64, its ...serve.Item) []serve.Item {
	for i := range its {
		its[i].Sequence = seq
	}
	return its
}

// TestCoalescedRange: a range of entries is one commit per table recording the range's last entry; a replay
// of the range or of a part of it is skipped; a range overlapping what the lake holds applies only the entries
// above the fence; and after a crash between the tables' commits of a range, a longer range applies, per
// table, only what that table lacks.
func TestCoalescedRange(t *testing.T) {
	e := newEnv(t, nil)
	us, os := usersSchema(), ordersSchema()
	one := tagged(1, serve.Item{Stream: "users", Record: batch(t, us, user(opI, 1, "a"), user(opI, 2, "b"))})
	two := tagged(2, serve.Item{Stream: "orders", Record: batch(t, os, r(opI, "o1", 1))})
	three := tagged(3, serve.Item{Stream: "users", Record: batch(t, us, user(opU, 1, "a3"))},
		serve.Item{Stream: "orders", Record: batch(t, os, r(opU, "o1", 3))})
	rng := append(append(append([]serve.Item{}, one...), two...), three...)
	if res, err := e.applyRange(1, 3, rng, rng...); err != nil || res.Skipped || res.Rows != 5 {
		t.Fatalf("apply 1..3: %+v, %v", res, err)
	}
	if n, m := snapshots(e, "users"), snapshots(e, "orders"); n != 1 || m != 1 {
		t.Fatalf("snapshots after one range: users %d, orders %d; want one each", n, m)
	}
	if a := e.lastApplied(); a.Sequence != 3 || a.Streams["users"] != 3 || a.Streams["orders"] != 3 {
		t.Fatalf("last applied %+v, want 3 everywhere", a)
	}
	e.check("users", "users", "id")
	e.check("orders", "orders", "order_id")

	// A replay of a part of the range is skipped whole.
	if res, err := e.applyRange(2, 3, append(append([]serve.Item{}, two...), three...)); err != nil || !res.Skipped {
		t.Fatalf("replay of 2..3: %+v, %v; want skipped", res, err)
	}

	// A range overlapping the fence: entry 3's items (here altered, so a wrong apply shows) stay out.
	stale := tagged(3, serve.Item{Stream: "users", Record: batch(t, us, user(opU, 1, "WRONG"))})
	four := tagged(4, serve.Item{Stream: "users", Record: batch(t, us, user(opI, 4, "d"))})
	five := tagged(5, serve.Item{Stream: "orders", Record: batch(t, os, r(opI, "o5", 5))})
	ov := append(append(append([]serve.Item{}, stale...), four...), five...)
	if res, err := e.applyRange(3, 5, ov, append(append([]serve.Item{}, four...), five...)...); err != nil || res.Skipped || res.Rows != 2 {
		t.Fatalf("apply 3..5 over fence 3: %+v, %v; want the 2 rows of 4 and 5", res, err)
	}
	e.check("users", "users", "id")
	e.check("orders", "orders", "order_id")

	// A crash after users' commit of 6..8 and before orders'.
	six := tagged(6, serve.Item{Stream: "users", Record: batch(t, us, user(opU, 2, "b6"))},
		serve.Item{Stream: "orders", Record: batch(t, os, r(opU, "o5", 6))})
	eight := tagged(8, serve.Item{Stream: "users", Record: batch(t, us, user(opD, 4, ""))})
	e.d.hooks.beforeCommit = func(tbl string, _ int) error {
		if tbl == "orders" {
			return errCrash
		}
		return nil
	}
	if _, err := e.applyRange(6, 8, append(append([]serve.Item{}, six...), eight...)); !errors.Is(err, errCrash) {
		t.Fatalf("apply 6..8: %v, want the simulated crash", err)
	}
	e.d.Close()
	e.d = &Destination{Version: "test", Log: testLogger(t)}
	t.Cleanup(func() { e.d.Close() })
	if a := e.lastApplied(); a.Sequence != 5 || a.Streams["users"] != 8 {
		t.Fatalf("after the crash: %+v, want marker 5 and users at 8", a)
	}
	e.fold(append([]serve.Item{six[0]}, eight...)...) // users holds 6..8 already
	usersSnaps := snapshots(e, "users")
	// The engine resumes after 5 with a longer range; users' items of 6..8 (altered here) must stay out.
	staleUsers := tagged(6, serve.Item{Stream: "users", Record: batch(t, us, user(opU, 2, "WRONG"))}, six[1])
	nine := tagged(9, serve.Item{Stream: "users", Record: batch(t, us, user(opI, 9, "i"))})
	retry := append(append(append([]serve.Item{}, staleUsers...), eight...), nine...)
	if res, err := e.applyRange(6, 9, retry, append([]serve.Item{six[1]}, nine...)...); err != nil || res.Skipped || res.Rows != 2 {
		t.Fatalf("apply 6..9 after the crash: %+v, %v; want orders' row of 6 and users' of 9", res, err)
	}
	e.check("users", "users", "id")
	e.check("orders", "orders", "order_id")
	if got := snapshots(e, "users"); got != usersSnaps+1 {
		t.Fatalf("users snapshots %d -> %d, want one more", usersSnaps, got)
	}
	if a := e.lastApplied(); a.Sequence != 9 || a.Streams["users"] != 9 || a.Streams["orders"] != 9 {
		t.Fatalf("after the retry: %+v, want 9 everywhere", a)
	}

	// A range whose items for users all lie below its fence leaves users alone: no commit, no snapshot.
	usersSnaps = snapshots(e, "users")
	ten := tagged(10, serve.Item{Stream: "orders", Record: batch(t, os, r(opI, "o10", 10))})
	if res, err := e.applyRange(9, 10, append(append([]serve.Item{}, nine...), ten...), ten...); err != nil || res.Skipped || res.Rows != 1 {
		t.Fatalf("apply 9..10: %+v, %v; want orders' row of 10", res, err)
	}
	if got := snapshots(e, "users"); got != usersSnaps {
		t.Fatalf("users snapshots %d -> %d: a table with nothing new was committed", usersSnaps, got)
	}
	e.check("users", "users", "id")
	e.check("orders", "orders", "order_id")
	if a := e.lastApplied(); a.Sequence != 10 || a.Streams["users"] != 9 || a.Streams["orders"] != 10 {
		t.Fatalf("after 9..10: %+v, want marker 10, users 9, orders 10", a)
	}
}
