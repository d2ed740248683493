package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/plugin-sdk/conformance"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/testkit/mysqltest"
)

// TestSettingSwitchedMidStream switches each binary-log setting a binlog reader depends on while a Read streams
// under a write load, as an administrator would (SET GLOBAL: sessions opened afterwards write the new way, those
// open before keep theirs). The Read must stop with a re-snapshot fault naming the setting, the position and the
// fix at the first change written the new way; every row committed before it must have arrived, none after it
// (not even rows an older session still wrote in full row form behind it).
//
// The server is the test's own: SET GLOBAL would change the shared server under other tests.
func TestSettingSwitchedMidStream(t *testing.T) {
	t.Parallel()
	srv := mysqltest.StartServer(t, mysqltest.Options{})
	for _, tc := range []struct {
		setting, value, restore string
		// after changes the table the new way, in a session opened after the switch.
		after string
	}{
		{"binlog_format", "STATEMENT", "ROW", "INSERT INTO a VALUES (2001, 'after', NULL); UPDATE a SET v = 'after' WHERE id = 1"},
		{"binlog_format", "MIXED", "ROW", "INSERT INTO a VALUES (2001, 'after', NULL); UPDATE a SET v = 'after' WHERE id = 1"},
		// A minimal update image holds the key before and the changed column after: not a whole row.
		{"binlog_row_image", "MINIMAL", "FULL", "UPDATE a SET v = 'after' WHERE id = 1"},
		{"binlog_row_image", "NOBLOB", "FULL", "UPDATE a SET v = 'after' WHERE id = 1"},
		{"binlog_row_metadata", "MINIMAL", "FULL", "INSERT INTO a VALUES (2001, 'after', NULL)"},
	} {
		t.Run(tc.setting+"="+tc.value, func(t *testing.T) {
			db := srv.NewDB(t)
			db.Exec(t, `CREATE TABLE a (id int PRIMARY KEY, v varchar(40), b blob); INSERT INTO a SELECT seq, 'start', NULL FROM seq_1_to_10`)
			r := startReading(t, startPlugin(t), settings(db, map[string]any{"tables": []string{"a"}}), nil)
			s := newState()
			catchUp(t, r, s, db)

			// The load: one session (opened before the switch, so it keeps writing full rows) inserts rows, one
			// transaction each, while the Read streams them.
			ctx := context.Background()
			old, err := db.Open(t).Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer old.Close()
			const before = 50
			for i := range before {
				if _, err := old.ExecContext(ctx, fmt.Sprintf("INSERT INTO a VALUES (%d, 'before', NULL)", 100+i)); err != nil {
					t.Fatal(err)
				}
			}
			// Every row before the switch arrives. (Waiting for it here, not after the fault: a Reading hands
			// over the Read's error as soon as it comes, possibly before the chunks sent ahead of it.)
			catchUp(t, r, s, db)

			srv.Exec(t, fmt.Sprintf("SET GLOBAL %s = '%s'", tc.setting, tc.value))
			t.Cleanup(func() { srv.Exec(t, fmt.Sprintf("SET GLOBAL %s = '%s'", tc.setting, tc.restore)) })
			db.Exec(t, tc.after) // a new session: the new setting
			for i := range 5 {
				// Behind the change written the new way, full rows of the older session: they must not arrive.
				if _, err := old.ExecContext(ctx, fmt.Sprintf("INSERT INTO a VALUES (%d, 'late', NULL)", 5000+i)); err != nil {
					t.Fatal(err)
				}
			}

			for {
				c, err := r.Next(2 * time.Minute)
				if err != nil {
					checkSwitchFault(t, err, tc.setting)
					break
				}
				s.apply(t, c)
			}
			rows := s.rows[db.Name+".a"]
			for id := 1; id <= 10; id++ {
				if v := rows[fmt.Sprint(id)]; !strings.Contains(v, "v=start") {
					t.Errorf("row %d: %q, want its value from before the switch", id, v)
				}
			}
			for i := range before {
				if v := rows[fmt.Sprint(100+i)]; !strings.Contains(v, "v=before") {
					t.Errorf("row %d, written before the switch, arrived as %q", 100+i, v)
				}
			}
			for k, v := range rows {
				if strings.Contains(v, "after") || strings.Contains(v, "late") {
					t.Errorf("row %s, written after the switch, arrived: %s", k, v)
				}
			}
			if len(rows) != 10+before {
				t.Errorf("%d rows arrived, want the %d written before the switch", len(rows), 10+before)
			}
		})
	}
}

func checkSwitchFault(t *testing.T, err error, setting string) {
	t.Helper()
	if !errors.Is(err, fault.ErrResnapshot) {
		t.Fatalf("after switching %s: %v (class %v), want a re-snapshot fault", setting, err, fault.ClassOf(err))
	}
	for _, w := range []string{setting, "binary log at ", "gtid"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("fault %q does not name %q", err, w)
		}
	}
	fix := fault.FixOf(err)
	for _, w := range []string{"SET GLOBAL " + setting, "empty checkpoint"} {
		if !strings.Contains(fix, w) {
			t.Errorf("fix %q does not say %q", fix, w)
		}
	}
}

// TestTwoPipelinesSameTables: two pipelines over the same tables, without a server_id in their settings, derive
// different ids from their names, so both stream on without evicting each other (they used to derive one id and
// evict each other for ever).
func TestTwoPipelinesSameTables(t *testing.T) {
	t.Parallel()
	db := mysqltest.NewDB(t)
	db.Exec(t, `CREATE TABLE a (id int PRIMARY KEY, v text); INSERT INTO a VALUES (1, 'x')`)
	set := settings(db, map[string]any{"tables": []string{"a"}})
	orders := conformance.StartReadingFor(t, startPlugin(t), "orders", set, nil)
	so := newState()
	catchUp(t, orders, so, db)
	audit := conformance.StartReadingFor(t, startPlugin(t), "audit", set, nil)
	sa := newState()
	catchUp(t, audit, sa, db)
	// Both must go on streaming: a change after the second connected reaches both.
	for i := 2; i <= 4; i++ {
		db.Exec(t, fmt.Sprintf(`INSERT INTO a VALUES (%d, 'y')`, i))
		catchUp(t, orders, so, db)
		catchUp(t, audit, sa, db)
	}
	if n := len(so.rows[db.Name+".a"]); n != 4 {
		t.Fatalf("pipeline orders holds %d rows, want 4", n)
	}
	same(t, so, sa)
}

// TestSameServerID: two Reads with one server_id (two pipelines over the same tables used to derive the same
// one) evict each other's binlog dump; the one evicted stops with a config fault naming server_id and the fix,
// not a transient error that reconnects and evicts the other in turn.
func TestSameServerID(t *testing.T) {
	t.Parallel()
	db := mysqltest.NewDB(t)
	db.Exec(t, `CREATE TABLE a (id int PRIMARY KEY, v text); INSERT INTO a VALUES (1, 'x')`)
	set := settings(db, map[string]any{"tables": []string{"a"}, "server_id": 3_000_000 + time.Now().UnixNano()%1_000_000})
	first := startReading(t, startPlugin(t), set, nil)
	catchUp(t, first, newState(), db)
	second := startReading(t, startPlugin(t), set, nil)
	catchUp(t, second, newState(), db)
	err := first.Err(time.Minute)
	if !errors.Is(err, fault.ErrConfig) || !strings.Contains(err.Error(), "server_id") || !strings.Contains(fault.FixOf(err), "set server_id") {
		t.Fatalf("evicted by a reader of the same server_id: %v (class %v, fix %q), want a config fault naming server_id", err, fault.ClassOf(err), fault.FixOf(err))
	}
}

// TestSameServerIDDerived: two Reads of one pipeline name over the same tables (the same pipeline run on two
// hosts) derive one server_id; the one evicted stops with a config fault whose fix also offers renaming the
// pipeline, since the id was derived, not set.
func TestSameServerIDDerived(t *testing.T) {
	t.Parallel()
	db := mysqltest.NewDB(t)
	db.Exec(t, `CREATE TABLE a (id int PRIMARY KEY, v text); INSERT INTO a VALUES (1, 'x')`)
	set := settings(db, map[string]any{"tables": []string{"a"}})
	first := conformance.StartReadingFor(t, startPlugin(t), "orders", set, nil)
	catchUp(t, first, newState(), db)
	second := conformance.StartReadingFor(t, startPlugin(t), "orders", set, nil)
	catchUp(t, second, newState(), db)
	err := first.Err(time.Minute)
	if !errors.Is(err, fault.ErrConfig) || !strings.Contains(err.Error(), "derived from the pipeline's name") || !strings.Contains(fault.FixOf(err), "rename this pipeline") {
		t.Fatalf("evicted by a reader of the same derived server_id: %v (class %v, fix %q), want a config fault offering a rename", err, fault.ClassOf(err), fault.FixOf(err))
	}
}
