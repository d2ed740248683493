package main

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// TestReadAfterCheck: in one plugin process, as `skippr sync` runs them, the Read that follows a passed Check
// streams through the replication session the check opened (source/warm.go), and still sees what changed
// between the two: a column added and a new table's rows, since only sessions are handed on, never what the
// check read; a slot dropped between them is refused as without the hand-off.
func TestReadAfterCheck(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE TABLE t (id int PRIMARY KEY, v int); CREATE TABLE late0 (id int PRIMARY KEY)`)
	src := startPlugin(t)
	set := settings(db, map[string]any{"tables": []string{"t", "public.late*"}, "slot": slot(db), "snapshot": false, "heartbeat": "1h"})
	r := startReading(t, src, set, nil)
	cp0 := r.mustNext(time.Minute)
	r.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// walsenders lists the replication sessions of the test's database.
	walsenders := func() []int32 {
		var pids []int32
		db.QueryRow(t, []any{&pids}, `SELECT coalesce(array_agg(pid ORDER BY pid), '{}') FROM pg_stat_activity WHERE backend_type = 'walsender' AND datname = $1`, db.Name)
		return pids
	}
	// check runs the check until the first Read's walsender has gone (until then the slot is in use, a
	// transient failure), and returns the replication session it left.
	check := func() int32 {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			err := src.Check(ctx, set)
			if err == nil {
				break
			}
			if !strings.Contains(err.Error(), "in use") || time.Now().After(deadline) {
				t.Fatalf("check: %v", err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		// The check's session has been identified only: it holds no slot. Only the first Read's may linger.
		for time.Now().Before(deadline) {
			var holder *int32
			db.QueryRow(t, []any{&holder}, `SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1`, slot(db))
			if pids := walsenders(); holder == nil && len(pids) == 1 {
				return pids[0]
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("after the check: walsenders %v, want the check's one alone", walsenders())
		return 0
	}

	checked := check()
	db.Exec(t, `ALTER TABLE t ADD COLUMN extra text; INSERT INTO t VALUES (1, 1, 'x');
		CREATE TABLE late1 (id int PRIMARY KEY); INSERT INTO late1 VALUES (7)`)
	r2 := startReading(t, src, set, cp0.cp.Position)
	// The table created after the check matches the pattern: the Read captures it (a copy while streaming).
	var extra, late bool
	for deadline := time.Now().Add(time.Minute); !(extra && late) && time.Now().Before(deadline); {
		for _, it := range r2.mustNext(time.Minute).items {
			if it.Schema == nil {
				continue
			}
			sc, err := protocol.DecodeSchema(memory.DefaultAllocator, it.Schema.ArrowSchema)
			if err != nil {
				t.Fatal(err)
			}
			extra = extra || it.Schema.Name == "public.t" && len(sc.FieldIndices("extra")) == 1
			late = late || it.Schema.Name == "public.late1"
		}
	}
	if !extra || !late {
		t.Fatalf("column added after the check seen: %v; table created after the check captured: %v; want both", extra, late)
	}
	var holder *int32
	db.QueryRow(t, []any{&holder}, `SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1`, slot(db))
	if holder == nil || *holder != checked {
		streaming := "none"
		if holder != nil {
			streaming = strconv.Itoa(int(*holder))
		}
		t.Errorf("the Read streams through server process %s, want the check's replication session %d", streaming, checked)
	}
	r2.stop()

	check()
	db.Exec(t, `SELECT pg_drop_replication_slot($1)`, slot(db))
	r3 := startReading(t, src, set, cp0.cp.Position)
	defer r3.stop()
	err := r3.readErr(time.Minute)
	if err == nil || !strings.Contains(err.Error(), "does not exist") || fault.ClassOf(err) != fault.Resnapshot {
		t.Fatalf("Read after the slot was dropped: %v (class %v), want a resnapshot error saying the slot does not exist", err, fault.ClassOf(err))
	}
}
