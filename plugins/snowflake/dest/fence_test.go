package dest

import (
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

// TestStaleWriterCannotMoveStateBack: a writer reads the fence (1), pauses before its transaction, and another
// process applies 2–3 meanwhile (an expired lease, a paused VM: the WAL's lease is not a fence the warehouse
// sees). When the stale writer wakes, its apply of 2 must fail and roll back: the state stays at 3 and the
// stale rows are not written. (On the stand-in the state MERGE waits on the other writer's row lock and
// re-reads the row, as Snowflake's DML waits for the table lock a MERGE holds until COMMIT.)
func TestStaleWriterCannotMoveStateBack(t *testing.T) {
	tg := newTarget(t, nil)
	s := ordersSchema()
	st := tg.stream("orders")
	mk := func(id int64, name string) arrow.RecordBatch {
		return orders(s, order{op: change.OpInsert, id: id, name: name, color: "c", atUnix: 1})
	}
	r1, r2, r3, stale := mk(1, "one"), mk(2, "two"), mk(3, "three"), mk(99, "stale")
	defer func() { r1.Release(); r2.Release(); r3.Release(); stale.Release() }()
	tg.apply(1, 1, item(st, 1, r1))

	overtaken := false
	slow := &Destination{TempDir: t.TempDir(), fenceRead: func(_ string, fence uint64) {
		if overtaken {
			return
		}
		overtaken = true
		if fence != 1 {
			t.Errorf("the stale writer read fence %d, want 1", fence)
		}
		// The other process: its own destination and session, applying 2–3 while the stale writer waits.
		tg.apply(2, 3, item(st, 2, r2), item(st, 3, r3))
	}}
	sd := serve.NewSessions(slow)
	defer sd.Close()
	_, err := sd.Apply(tctx(t), serve.ApplyRequest{Settings: tg.settings, Pipeline: tg.pipeline, FirstSequence: 2, Sequence: 2,
		Items: []serve.Item{item(st, 2, stale)}})
	if err == nil || !strings.Contains(err.Error(), "another process applied the pipeline") {
		t.Fatalf("the stale writer's apply: %v, want it refused because the state moved", err)
	}
	a, err := tg.d.LastApplied(tctx(t), tg.settings, tg.pipeline)
	if err != nil || a.Sequence != 3 || a.Streams[st] != 3 {
		t.Fatalf("LastApplied %+v, %v; want 3: the stale writer moved the state back", a, err)
	}
	got := tg.rows(TableName(st))
	if _, ok := got["99"]; ok || len(got) != 3 {
		t.Fatalf("rows %v: want 1, 2, 3 and not the stale writer's 99", got)
	}
	// Its next attempt reads the state again and skips what the other process committed.
	res, err := sd.Apply(tctx(t), serve.ApplyRequest{Settings: tg.settings, Pipeline: tg.pipeline, FirstSequence: 2, Sequence: 2,
		Items: []serve.Item{item(st, 2, stale)}})
	if err != nil || !res.Skipped {
		t.Fatalf("the stale writer's retry: %+v, %v; want skipped", res, err)
	}
}
