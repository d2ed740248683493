package main

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/jackc/pglogrepl"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
	"github.com/skippr-dev/skippr/plugins/postgres/source"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// TestAckSemantics: without an Ack a new Read from the same checkpoint delivers the same transaction again;
// an Ack moves confirmed_flush_lsn exactly to the acknowledged position, after which the slot no longer has
// the transaction.
func TestAckSemantics(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE TABLE t (id int PRIMARY KEY, v int)`)
	src := startPlugin(t)
	set := settings(db, map[string]any{"tables": []string{"t"}, "slot": slot(db), "snapshot": false, "heartbeat": "1h"})
	r := startReading(t, src, set, nil)
	cp0 := r.mustNext(time.Minute)
	if !cp0.cp.Idle || cp0.rows != 0 {
		t.Fatalf("first checkpoint without a snapshot: idle %v after %d rows, want an idle one", cp0.cp.Idle, cp0.rows)
	}
	created := confirmedFlush(t, db, slot(db))
	db.Exec(t, `INSERT INTO t SELECT g, g FROM generate_series(1, 3) g`)
	db.Exec(t, `INSERT INTO t VALUES (4, 4), (5, 5)`)
	var a, b chunk
	for a.rows == 0 {
		a = r.mustNext(time.Minute)
	}
	for b.rows == 0 {
		b = r.mustNext(time.Minute)
	}
	if a.rows != 3 || b.rows != 2 {
		t.Fatalf("transactions of 3 and 2 rows came as %d and %d", a.rows, b.rows)
	}
	r.stop()
	if got := confirmedFlush(t, db, slot(db)); got != created {
		t.Fatalf("without an ack the slot moved from %s to %s", created, got)
	}

	// Not acknowledged: read again from the same checkpoint, in a new process as after a crash.
	src2 := startPlugin(t)
	r2 := startReading(t, src2, set, cp0.cp.Position)
	var again chunk
	for again.rows == 0 {
		again = r2.mustNext(time.Minute)
	}
	if !bytes.Equal(again.cp.Position, a.cp.Position) || !sameBatchBytes(again, a) {
		t.Fatalf("re-read after no ack reached %s with %d rows; first read reached %s with %d rows", again.cp.Position, again.rows, a.cp.Position, a.rows)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := src2.Ack(ctx, again.cp.Position); err != nil {
		t.Fatal(err)
	}
	want := position(t, again.cp.Position).LSN
	deadline := time.Now().Add(30 * time.Second)
	for confirmedFlush(t, db, slot(db)) != want {
		if time.Now().After(deadline) {
			t.Fatalf("confirmed_flush_lsn is %s after acking %s", confirmedFlush(t, db, slot(db)), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
	r2.stop()
	if got := confirmedFlush(t, db, slot(db)); got != want {
		t.Fatalf("confirmed_flush_lsn moved past the ack: %s, want %s", got, want)
	}
	// The acknowledged transaction is released: reading from the old checkpoint now starts after it.
	r3 := startReading(t, src2, set, cp0.cp.Position)
	var next chunk
	for next.rows == 0 {
		next = r3.mustNext(time.Minute)
	}
	// Positions carry a running row count, which depends on where a read began: compare the LSN.
	if next.rows != 2 || position(t, next.cp.Position).LSN != position(t, b.cp.Position).LSN {
		t.Fatalf("after the ack, the first transaction read has %d rows at %s, want the second one (2 rows at %s)", next.rows, next.cp.Position, b.cp.Position)
	}
	// An Ack after the Read ended moves the idle slot too.
	r3.stop()
	if err := src2.Ack(ctx, next.cp.Position); err != nil {
		t.Fatal(err)
	}
	if got, want := confirmedFlush(t, db, slot(db)), position(t, next.cp.Position).LSN; got != want {
		t.Fatalf("after an Ack with no Read running, confirmed_flush_lsn is %s, want %s", got, want)
	}
}

func sameBatchBytes(a, b chunk) bool {
	var x, y [][]byte
	for _, it := range a.items {
		if it.Batch != nil {
			x = append(x, it.Batch.IPC)
		}
	}
	for _, it := range b.items {
		if it.Batch != nil {
			y = append(y, it.Batch.IPC)
		}
	}
	if len(x) != len(y) {
		return false
	}
	for i := range x {
		if !bytes.Equal(x[i], y[i]) {
			return false
		}
	}
	return true
}

// TestSchemaChangesWhileStreaming: added columns reach the destination (announced before the first batch
// that has them), a type change widens the destination column, a dropped column stays there.
func TestSchemaChangesWhileStreaming(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE TABLE t (id int PRIMARY KEY, a text); ALTER TABLE t REPLICA IDENTITY FULL;
		INSERT INTO t VALUES (1, 'one'), (2, 'two'), (3, 'three')`)
	src, dst := startPlugin(t), startPlugin(t)
	p := newPipe(t, src, dst, settings(db, map[string]any{"tables": []string{"t"}, "slot": slot(db)}), settings(db, map[string]any{"schema": "replica"}))
	p.start()
	p.catchUp(db, time.Minute)

	db.Exec(t, `ALTER TABLE t ADD COLUMN b int; INSERT INTO t VALUES (4, 'four', 40); UPDATE t SET b = id * 10 WHERE id <= 2`)
	var c chunk
	for c.rows == 0 {
		var err error
		if c, err = p.step(time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if c.items[0].Schema == nil {
		t.Fatalf("the first batch with the new column came without a schema change before it")
	}
	sc, err := protocol.DecodeSchema(memory.DefaultAllocator, c.items[0].Schema.ArrowSchema)
	if err != nil {
		t.Fatal(err)
	}
	if len(sc.FieldIndices("b")) != 1 {
		t.Fatalf("the schema change lacks column b: %s", sc)
	}
	p.catchUp(db, time.Minute)
	sameRows(t, db, "public.t", "replica.t")

	db.Exec(t, `ALTER TABLE t ALTER COLUMN b TYPE bigint; INSERT INTO t VALUES (5, 'five', 5000000000)`)
	p.catchUp(db, time.Minute)
	sameRows(t, db, "public.t", "replica.t")

	db.Exec(t, `ALTER TABLE t DROP COLUMN a; INSERT INTO t VALUES (6, 60); UPDATE t SET b = 11 WHERE id = 1`)
	p.catchUp(db, time.Minute)
	sameRows(t, db, "(SELECT id, b FROM public.t)", "(SELECT id, b FROM replica.t)")
	var a string
	db.QueryRow(t, []any{&a}, `SELECT coalesce(a, '<null>') FROM replica.t WHERE id = 6`)
	if a != "<null>" {
		t.Errorf("a row inserted after the column was dropped has a = %q in the destination, want NULL", a)
	}
}

// TestAddColumnWithDefault: ADD COLUMN … DEFAULT x fills the existing rows without logging them; the
// destination's existing rows get the same value, and rows after it keep their own (NULL included).
func TestAddColumnWithDefault(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE TABLE t (id int PRIMARY KEY, a text); INSERT INTO t VALUES (1, 'one'), (2, 'two')`)
	src, dst := startPlugin(t), startPlugin(t)
	p := newPipe(t, src, dst, settings(db, map[string]any{"tables": []string{"t"}, "slot": slot(db)}), settings(db, map[string]any{"schema": "replica"}))
	p.start()
	p.catchUp(db, time.Minute)

	db.Exec(t, `ALTER TABLE t ADD COLUMN n int DEFAULT 42, ADD COLUMN s text DEFAULT E'it''s \\ {x}', ADD COLUMN ts timestamptz DEFAULT '2024-01-02 03:04:05+00', ADD COLUMN plain int;
		INSERT INTO t VALUES (3, 'three', NULL, NULL, NULL, 7)`)
	p.catchUp(db, time.Minute)
	sameRows(t, db, "public.t", "replica.t")
	// The destination keeps no default of its own: a row without a value stays NULL.
	var def *string
	db.QueryRow(t, []any{&def}, `SELECT column_default FROM information_schema.columns WHERE table_schema = 'replica' AND table_name = 't' AND column_name = 'n'`)
	if def != nil {
		t.Errorf("replica.t.n keeps default %q", *def)
	}
}

// TestAddColumnWithDefaultThenRewrite (#28): ADD COLUMN … DEFAULT 42, then an insert, an update, a DROP COLUMN
// and an ALTER COLUMN … TYPE, all committed before the source decodes the first of them (here: while it is
// stopped). The type change rewrites the table, which drops the catalog's record of the value the old rows got
// (attmissingval), so the source reads the column's constant default instead: the rows untouched since hold
// 42 in the destination as at the source.
func TestAddColumnWithDefaultThenRewrite(t *testing.T) {
	t.Parallel()
	for _, retyped := range []string{"added", "a"} {
		t.Run("retype-"+retyped, func(t *testing.T) {
			t.Parallel()
			db := pgtest.NewDB(t)
			db.Exec(t, `CREATE TABLE t (id int PRIMARY KEY, a int, b text); INSERT INTO t SELECT g, g, 'b' || g FROM generate_series(1, 4) g`)
			src, dst := startPlugin(t), startPlugin(t)
			p := newPipe(t, src, dst, settings(db, map[string]any{"tables": []string{"t"}, "slot": slot(db)}), settings(db, map[string]any{"schema": "replica"}))
			p.start()
			p.catchUp(db, time.Minute)
			p.r.stop()
			for _, q := range []string{
				`ALTER TABLE t ADD COLUMN added int DEFAULT 42`,
				`INSERT INTO t VALUES (5, 5, 'b5', 7)`,
				`UPDATE t SET a = 10 WHERE id = 1`,
				`ALTER TABLE t DROP COLUMN b`,
				`ALTER TABLE t ALTER COLUMN ` + retyped + ` TYPE bigint`,
			} {
				db.Exec(t, q)
			}
			p.start()
			p.catchUp(db, time.Minute)
			sameRows(t, db, "(SELECT id, a, added FROM public.t)", "(SELECT id, a, added FROM replica.t)")
			if got := strings.Join(rowsText(t, db, "(SELECT id, added FROM replica.t)"), " "); got != "(1,42) (2,42) (3,42) (4,42) (5,7)" {
				t.Errorf("replica.t (id, added): %s", got)
			}
		})
	}
}

// TestTruncate: a TRUNCATE empties the destination's table in order with the rows around it (truncate:
// propagate, the default, here with rows before and after it in one transaction), stops the Read with an
// error naming the fix, or is skipped with truncate: ignore.
func TestTruncate(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"propagate", "default", "error", "ignore"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			db := pgtest.NewDB(t)
			db.Exec(t, `CREATE TABLE t (id int PRIMARY KEY, v int); INSERT INTO t VALUES (1, 1), (2, 2)`)
			src, dst := startPlugin(t), startPlugin(t)
			set := map[string]any{"tables": []string{"t"}, "slot": slot(db), "truncate": mode}
			if mode == "default" {
				delete(set, "truncate")
			}
			p := newPipe(t, src, dst, settings(db, set), settings(db, map[string]any{"schema": "replica"}))
			p.start()
			p.catchUp(db, time.Minute)
			if mode == "propagate" || mode == "default" {
				db.Exec(t, `BEGIN; INSERT INTO t VALUES (4, 4); UPDATE t SET v = 10 WHERE id = 1; TRUNCATE t; INSERT INTO t VALUES (5, 5), (1, 11); UPDATE t SET v = 55 WHERE id = 5; COMMIT`)
				p.catchUp(db, time.Minute)
				sameRows(t, db, "(SELECT id, v FROM public.t)", "(SELECT id, v FROM replica.t)")
				if got := strings.Join(rowsText(t, db, "replica.t"), " "); got != "(1,11) (5,55)" {
					t.Fatalf("after a TRUNCATE between rows the destination holds %v, want (1,11) (5,55)", got)
				}
				return
			}
			db.Exec(t, `TRUNCATE t; INSERT INTO t VALUES (3, 3)`)
			if mode == "error" {
				err := p.r.readErr(time.Minute)
				if !strings.Contains(err.Error(), "public.t was truncated") || !strings.Contains(err.Error(), "truncate: ignore") {
					t.Fatalf("got %v, want an error saying the table was truncated and how to go on", err)
				}
				return
			}
			p.catchUp(db, time.Minute)
			got := rowsText(t, db, "replica.t")
			if strings.Join(got, " ") != "(1,1) (2,2) (3,3)" {
				t.Fatalf("after an ignored TRUNCATE and an insert the destination holds %v, want the old rows and the new one", got)
			}
		})
	}
}

// TestUnchangedToast: an update that leaves a TOASTed value alone must not write NULL over it.
func TestUnchangedToast(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, identity, mode string
		// dropFull: the identity goes back to DEFAULT after the start checks passed, so the update reaches
		// the stream without the value.
		dropFull bool
	}{
		{name: "replica-identity-full", identity: "FULL", mode: "require_full"},
		{name: "fetch", identity: "DEFAULT", mode: "fetch"},
		{name: "default-is-fetch", identity: "DEFAULT"},
		{name: "refused-in-stream", identity: "FULL", mode: "require_full", dropFull: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := pgtest.NewDB(t)
			// 200 kB of md5 text does not compress below the TOAST threshold: it is stored out of line.
			db.Exec(t, `CREATE TABLE docs (id int PRIMARY KEY, body text, n int);
				ALTER TABLE docs REPLICA IDENTITY `+tc.identity+`;
				INSERT INTO docs SELECT g, (SELECT string_agg(md5(random()::text || g || i), '') FROM generate_series(1, 6000) s(i)), 0 FROM generate_series(1, 3) gs(g)`)
			srcSet := map[string]any{"tables": []string{"docs"}, "slot": slot(db)}
			if tc.mode != "" {
				srcSet["unchanged_toast"] = tc.mode
			}
			src, dst := startPlugin(t), startPlugin(t)
			p := newPipe(t, src, dst, settings(db, srcSet), settings(db, map[string]any{"schema": "replica"}))
			p.start()
			p.catchUp(db, time.Minute)
			if tc.dropFull {
				db.Exec(t, `ALTER TABLE docs REPLICA IDENTITY DEFAULT`)
			}
			db.Exec(t, `UPDATE docs SET n = n + 1`)
			if tc.dropFull {
				err := p.r.readErr(time.Minute)
				if !strings.Contains(err.Error(), "body") || fault.ClassOf(err) != fault.Config {
					t.Fatalf("got %v (class %v), want a config error naming column body", err, fault.ClassOf(err))
				}
				// REPLICA IDENTITY FULL does not help updates already in the slot: the fix must say what does.
				if fix := fault.FixOf(err); !strings.Contains(fix, "REPLICA IDENTITY FULL") || !strings.Contains(fix, "unchanged_toast: fetch") || !strings.Contains(fix, "already in the slot") || !strings.Contains(fix, "re-snapshot") {
					t.Fatalf("fix %q must name fetch (the way past updates already in the slot), re-snapshot and REPLICA IDENTITY FULL", fix)
				}
				return
			}
			p.catchUp(db, time.Minute)
			sameRows(t, db, "(SELECT id, md5(body), length(body), n FROM public.docs)", "(SELECT id, md5(body), length(body), n FROM replica.docs)")
		})
	}
}

// TestReadRefusesAtStart: a table that would stop the stream later is refused before anything is read, as a
// config error (the pipeline fails instead of retrying) that says what to do.
func TestReadRefusesAtStart(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE TABLE nokey (a int, b text);
		CREATE TABLE nokeyfull (a int); ALTER TABLE nokeyfull REPLICA IDENTITY FULL;
		CREATE TABLE toasty (id int PRIMARY KEY, body text);
		CREATE TABLE nothing (id int PRIMARY KEY); ALTER TABLE nothing REPLICA IDENTITY NOTHING;
		CREATE TABLE good (id int PRIMARY KEY, n int)`)
	src := startPlugin(t)
	for _, tc := range []struct {
		name  string
		extra map[string]any
		want  []string
	}{
		{"no key", map[string]any{"tables": []string{"good", "nokey"}}, []string{"public.nokey has no primary key", "ADD PRIMARY KEY"}},
		{"no key, identity full", map[string]any{"tables": []string{"nokeyfull"}}, []string{"public.nokeyfull has no primary key"}},
		{"TOAST under require_full", map[string]any{"tables": []string{"toasty"}, "unchanged_toast": "require_full"},
			[]string{"body (text)", `ALTER TABLE "public"."toasty" REPLICA IDENTITY FULL`, "unchanged_toast: fetch"}},
		{"identity nothing", map[string]any{"tables": []string{"nothing"}}, []string{"REPLICA IDENTITY NOTHING"}},
		{"key_columns without identity full", map[string]any{"tables": []string{"nokey"}, "table_options": map[string]any{"nokey": map[string]any{"key_columns": []string{"a"}}}},
			[]string{"keyed on key_columns (a)", `ALTER TABLE "public"."nokey" REPLICA IDENTITY FULL`, "may hold NULL"}},
		{"key_columns naming no column", map[string]any{"tables": []string{"nokeyfull"}, "table_options": map[string]any{"nokeyfull": map[string]any{"key_columns": []string{"zz"}}}},
			[]string{`table public.nokeyfull has no column "zz"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.extra["slot"] = slot(db)
			start := time.Now()
			r := startReading(t, src, settings(db, tc.extra), nil)
			defer r.stop()
			var err error
			select {
			case m := <-r.Messages():
				t.Fatalf("the Read sent %T before refusing", m)
			case err = <-r.Errors():
			case <-time.After(time.Minute):
				t.Fatal("the Read did not refuse")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if fault.ClassOf(err) != fault.Config || fault.FixOf(err) == "" {
				t.Errorf("class %v, fix %q: want a config error with a fix", fault.ClassOf(err), fault.FixOf(err))
			}
			t.Logf("refused in %s: %v", time.Since(start).Round(time.Millisecond), err)
		})
	}
	// Nothing was created for the refused tables: no slot.
	var slots int
	db.QueryRow(t, []any{&slots}, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, slot(db))
	if slots != 0 {
		t.Error("a slot exists after the refusals")
	}
}

// TestPartitionedTable: partitions publish through their root; a row moving between partitions arrives as
// a delete and an insert of the root's stream.
func TestPartitionedTable(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE TABLE m (id int, region text, v int, PRIMARY KEY (id, region)) PARTITION BY LIST (region);
		CREATE TABLE m_eu PARTITION OF m FOR VALUES IN ('eu');
		CREATE TABLE m_us PARTITION OF m FOR VALUES IN ('us');
		ALTER TABLE m_eu REPLICA IDENTITY FULL; ALTER TABLE m_us REPLICA IDENTITY FULL;
		INSERT INTO m SELECT g, CASE WHEN g % 2 = 0 THEN 'eu' ELSE 'us' END, g FROM generate_series(1, 100) g`)
	src, dst := startPlugin(t), startPlugin(t)
	srcSet := settings(db, map[string]any{"tables": []string{"m"}, "slot": slot(db), "batch_size": 30})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := src.Check(ctx, srcSet); err != nil {
		t.Fatalf("check: %v", err)
	}
	p := newPipe(t, src, dst, srcSet, settings(db, map[string]any{"schema": "replica"}))
	p.start()
	p.catchUp(db, time.Minute)
	db.Exec(t, `INSERT INTO m VALUES (101, 'eu', 1), (102, 'us', 2); UPDATE m SET region = 'eu' WHERE id = 1; UPDATE m SET v = -v WHERE region = 'us'; DELETE FROM m WHERE id = 50`)
	p.catchUp(db, time.Minute)
	sameRows(t, db, "public.m", "replica.m")
}

// TestHeartbeatMovesIdleSlot: the heartbeat never moves the slot over data that is not acknowledged, but
// once everything is acknowledged, WAL of other tables must not stay pinned by the slot. The slot's retained
// WAL above max_retained_wal_bytes is logged.
func TestHeartbeatMovesIdleSlot(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE TABLE t (id int PRIMARY KEY); CREATE TABLE other (id int PRIMARY KEY)`)
	src, dst := startPlugin(t), startPlugin(t)
	p := newPipe(t, src, dst, settings(db, map[string]any{"tables": []string{"t"}, "slot": slot(db), "snapshot": false, "heartbeat": "200ms", "max_retained_wal_bytes": 1000}), settings(db, map[string]any{"schema": "replica"}))
	p.start()
	p.r.mustNext(time.Minute) // the slot exists once the first (idle) checkpoint comes
	created := confirmedFlush(t, db, slot(db))
	db.Exec(t, `INSERT INTO t VALUES (1)`)
	var c chunk
	for c.rows == 0 {
		c = p.r.mustNext(time.Minute)
	}
	// Read but not acknowledged: heartbeats and unrelated WAL must leave the slot where it is.
	db.Exec(t, `INSERT INTO other SELECT generate_series(1, 1000)`)
	time.Sleep(1500 * time.Millisecond)
	// The heartbeat may move the slot over the data-free WAL before the transaction, never to its end.
	got, _ := pglogrepl.ParseLSN(confirmedFlush(t, db, slot(db)))
	if end := position(t, c.cp.Position).LSNValue(); got >= end {
		t.Fatalf("the slot moved from %s to %s, past the end %s of a transaction that was not acknowledged", created, got, end)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := dst.Apply(ctx, p.dstSet, p.pipeline, 1, c.items); err != nil {
		t.Fatal(err)
	}
	if err := src.Ack(ctx, c.cp.Position); err != nil {
		t.Fatal(err)
	}
	acked := position(t, c.cp.Position).LSN
	db.Exec(t, `INSERT INTO other SELECT generate_series(1001, 10000)`)
	var now string
	db.QueryRow(t, []any{&now}, `SELECT pg_current_wal_lsn()::text`)
	want, _ := pglogrepl.ParseLSN(now)
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, _ := pglogrepl.ParseLSN(confirmedFlush(t, db, slot(db)))
		if c >= want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slot stayed at %s (acknowledged %s) while the server's WAL went to %s with nothing to deliver", c, acked, now)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if tail := src.StderrTail(); !strings.Contains(tail, "holds back more WAL than max_retained_wal_bytes") {
		t.Errorf("no warning about retained WAL in the plugin's log:\n%s", tail)
	}
}

// TestHeartbeatWaitsForSnapshotAck: while the snapshot is not acknowledged, the slot stays at its
// consistent point (a resumed snapshot needs it there), however idle the stream is.
func TestHeartbeatWaitsForSnapshotAck(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t SELECT generate_series(1, 100); CREATE TABLE other (id int PRIMARY KEY)`)
	src := startPlugin(t)
	r := startReading(t, src, settings(db, map[string]any{"tables": []string{"t"}, "slot": slot(db), "heartbeat": "200ms", "batch_size": 50}), nil)
	var done chunk
	for {
		c := r.mustNext(time.Minute)
		if position(t, c.cp.Position).Phase == source.PhaseStream {
			done = c
			break
		}
	}
	for !r.mustNext(time.Minute).cp.Idle {
	}
	db.Exec(t, `INSERT INTO other SELECT generate_series(1, 1000)`)
	time.Sleep(1500 * time.Millisecond)
	start := position(t, done.cp.Position).LSN
	if got := confirmedFlush(t, db, slot(db)); got != start {
		t.Fatalf("the slot moved from the snapshot's start %s to %s before the snapshot was acknowledged", start, got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := src.Ack(ctx, done.cp.Position); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for confirmedFlush(t, db, slot(db)) == start {
		if time.Now().After(deadline) {
			t.Fatalf("the slot stayed at %s after the snapshot was acknowledged and the stream was idle", start)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRestartBeforeFirstCheckpoint: a crash after the slot was created but before any checkpoint was
// acknowledged leaves a slot without its exported snapshot; the next Read copies the current rows and
// streams from the slot, and the destination still ends equal to the source.
func TestRestartBeforeFirstCheckpoint(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE TABLE t (id int PRIMARY KEY, v int); INSERT INTO t SELECT g, g FROM generate_series(1, 3000) g`)
	srcSet := settings(db, map[string]any{"tables": []string{"t"}, "slot": slot(db), "batch_size": 1000})
	src := startPlugin(t)
	r := startReading(t, src, srcSet, nil)
	r.mustNext(time.Minute)
	db.Exec(t, `UPDATE t SET v = -v WHERE id % 2 = 0; DELETE FROM t WHERE id % 7 = 0; INSERT INTO t VALUES (5000, 5)`)
	kill(t, src)
	p := newPipe(t, startPlugin(t), startPlugin(t), srcSet, settings(db, map[string]any{"schema": "replica"}))
	p.start()
	db.Exec(t, `UPDATE t SET v = 0 WHERE id < 10`)
	p.catchUp(db, time.Minute)
	sameRows(t, db, "public.t", "replica.t")
}

// TestKillAndResume kills the source process in the middle of the snapshot and again while streaming, with
// writes going on; restarted from the last acknowledged checkpoint, the destination ends equal to the source.
func TestKillAndResume(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE TABLE acct (id int PRIMARY KEY, v int, note text); ALTER TABLE acct REPLICA IDENTITY FULL;
		INSERT INTO acct SELECT g, g, 'n' || g FROM generate_series(1, 30000) g`)
	srcSet := settings(db, map[string]any{"tables": []string{"acct"}, "slot": slot(db), "batch_size": 1000})
	dst := startPlugin(t)
	src := startPlugin(t)
	p := newPipe(t, src, dst, srcSet, settings(db, map[string]any{"schema": "replica"}))
	p.start()
	for i := 0; i < 5; i++ {
		if _, err := p.step(time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	// A chunk read but not acknowledged, then writes, then the kill.
	if _, err := p.r.next(time.Minute); err != nil {
		t.Fatal(err)
	}
	db.Exec(t, `UPDATE acct SET v = v + 1 WHERE id % 5 = 0; DELETE FROM acct WHERE id % 13 = 0; INSERT INTO acct SELECT g, g, 'new' FROM generate_series(30001, 31000) g`)
	kill(t, src)

	src = startPlugin(t)
	p.src = src
	p.start()
	for {
		c, err := p.step(time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if position(t, c.cp.Position).Phase == source.PhaseStream {
			break
		}
	}
	db.Exec(t, `UPDATE acct SET note = 'streamed' WHERE id < 500; INSERT INTO acct VALUES (40000, 0, 'x')`)
	// Apply the next transaction but crash before acknowledging it: it comes again and must apply cleanly.
	for {
		c, err := p.r.next(time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if len(c.items) > 0 {
			p.seq++
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			_, err := p.dst.Apply(ctx, p.dstSet, p.pipeline, p.seq, c.items)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	kill(t, src)
	db.Exec(t, `DELETE FROM acct WHERE id BETWEEN 100 AND 200`)
	p.src = startPlugin(t)
	p.start()
	p.catchUp(db, time.Minute)
	sameRows(t, db, "public.acct", "replica.acct")
}

func kill(t *testing.T, c interface{ Pid() int }) {
	t.Helper()
	pid := c.Pid()
	if pid == 0 {
		t.Fatal("no plugin pid")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 200; i++ {
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err != nil {
			return
		}
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil && strings.Contains(string(b), ") Z ") {
			return // a zombie until go-plugin reaps it
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("plugin %d did not die", pid)
}

// TestDrop removes the slot and the publication the plugin created, and refuses while the slot is in use.
func TestDrop(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE TABLE t (id int PRIMARY KEY)`)
	src := startPlugin(t)
	set := settings(db, map[string]any{"tables": []string{"t"}, "slot": slot(db), "publication": "pub_" + db.Name})
	r := startReading(t, src, set, nil)
	r.mustNext(time.Minute)
	// The first checkpoint (the empty table's snapshot) can come before the replication session starts:
	// wait until the slot is in use, which is what this part tests.
	for deadline := time.Now().Add(30 * time.Second); ; {
		var active bool
		db.QueryRow(t, []any{&active}, `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, slot(db))
		if active {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the slot never became active while reading")
		}
		time.Sleep(20 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := source.Drop(ctx, set); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("drop while reading: got %v, want an in-use error", err)
	}
	r.stop()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := source.Drop(ctx, set)
		if err == nil {
			break
		}
		if !strings.Contains(err.Error(), "in use") || time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var slots, pubs int
	db.QueryRow(t, []any{&slots, &pubs}, `SELECT (SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1), (SELECT count(*) FROM pg_publication WHERE pubname = $2)`, slot(db), "pub_"+db.Name)
	if slots != 0 || pubs != 0 {
		t.Fatalf("after drop: %d slots and %d publications left", slots, pubs)
	}
	// A publication the plugin did not create stays.
	db.Exec(t, `CREATE PUBLICATION mine FOR TABLE t`)
	if _, err := source.Drop(ctx, settings(db, map[string]any{"tables": []string{"t"}, "slot": slot(db), "publication": "mine"})); err != nil {
		t.Fatal(err)
	}
	db.QueryRow(t, []any{&pubs}, `SELECT count(*) FROM pg_publication WHERE pubname = 'mine'`)
	if pubs != 1 {
		t.Fatalf("drop removed a publication it did not create")
	}
}

// TestForeignPublication: a publication made by hand is used as it is, but one that lacks a table stops the
// Read before anything is copied (the table's changes would never come).
func TestForeignPublication(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE TABLE a (id int PRIMARY KEY); CREATE TABLE b (id int PRIMARY KEY); CREATE PUBLICATION only_a FOR TABLE a`)
	src := startPlugin(t)
	r := startReading(t, src, settings(db, map[string]any{"tables": []string{"a", "b"}, "slot": slot(db), "publication": "only_a"}), nil)
	if err := r.readErr(time.Minute); !strings.Contains(err.Error(), "does not include table public.b") || !strings.Contains(err.Error(), "ALTER PUBLICATION") {
		t.Fatalf("got %v, want an error naming the missing table and the fix", err)
	}
	var slots int
	db.QueryRow(t, []any{&slots}, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, slot(db))
	if slots != 0 {
		t.Errorf("a slot was created although the publication is incomplete")
	}
}

// TestWaitsForPreviousReader: a reader that pauses (a fleet worker cut off or SIGSTOPped) keeps its walsender
// and so the slot; the next reader waits for it to go instead of failing — here for 30 s, well past the ten
// seconds the start once retried for (plus the new reader's own start-up).
func TestWaitsForPreviousReader(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE TABLE acct (id int PRIMARY KEY, v int); INSERT INTO acct SELECT g, g FROM generate_series(1, 100) g`)
	srcSet := settings(db, map[string]any{"tables": []string{"acct"}, "slot": slot(db)})
	old := startPlugin(t)
	p := newPipe(t, old, startPlugin(t), srcSet, settings(db, map[string]any{"schema": "replica"}))
	p.start()
	for {
		c, err := p.step(time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if position(t, c.cp.Position).Phase == source.PhaseStream {
			break
		}
	}
	pid := old.Pid()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	released := make(chan time.Time, 1)
	go func() {
		time.Sleep(30 * time.Second)
		syscall.Kill(pid, syscall.SIGKILL) // its connection closes, and with it the walsender
		released <- time.Now()
	}()
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	p.src = startPlugin(t)
	p.start()
	db.Exec(t, `INSERT INTO acct VALUES (1000, 1); UPDATE acct SET v = 0 WHERE id = 7`)
	p.catchUp(db, 2*time.Minute)
	select {
	case <-released:
	default:
		t.Fatal("caught up while the previous reader still held the slot")
	}
	sameRows(t, db, "public.acct", "replica.acct")
}
