package main

import (
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/jackc/pglogrepl"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
	"github.com/skippr-dev/skippr/plugins/postgres/source"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// A snapshot resumed after a crash reads under a fresh snapshot, which may already hold rows inserted after
// the slot's consistent point. Streaming replays those inserts: they must arrive as updates (upserts), or an
// append-only destination holds the row twice. Inserts committed after the resumed snapshot stay inserts.
func TestResumedSnapshotSendsOverlappingInsertsAsUpdates(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE TABLE t (id int PRIMARY KEY, v int); INSERT INTO t SELECT g, g FROM generate_series(1, 3000) g`)
	srcSet := settings(db, map[string]any{"tables": []string{"t"}, "slot": slot(db), "batch_size": 1000})
	src := startPlugin(t)
	p := newPipe(t, src, startPlugin(t), srcSet, settings(db, map[string]any{"schema": "replica"}))
	p.start()
	if _, err := p.step(time.Minute); err != nil {
		t.Fatal(err)
	}
	kill(t, src)
	db.Exec(t, `INSERT INTO t VALUES (5000, 1)`) // after the slot's start, before the resumed copy: in both

	p.src = startPlugin(t)
	p.start()
	ops := map[int32][]change.Op{}
	collect := func(c chunk) {
		for _, it := range c.items {
			if it.Batch == nil {
				continue
			}
			recs, _, err := protocol.DecodeRecords(memory.DefaultAllocator, it.Batch.IPC)
			if err != nil {
				t.Fatal(err)
			}
			for _, rec := range recs {
				idCol := rec.Schema().FieldIndices("id")[0]
				opCol := rec.Schema().FieldIndices(change.OpColumn)[0]
				for i := 0; i < int(rec.NumRows()); i++ {
					id := rec.Column(idCol).(*array.Int32).Value(i)
					ops[id] = append(ops[id], change.Op(rec.Column(opCol).(*array.Int8).Value(i)))
				}
				rec.Release()
			}
		}
	}
	var done *source.Position
	for done == nil {
		c, err := p.step(time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		collect(c)
		if pos := position(t, c.cp.Position); pos.Phase == source.PhaseStream {
			done = pos
		}
	}
	if done.Overlap == "" || done.OverlapValue() <= done.LSNValue() {
		t.Fatalf("the resumed snapshot's last checkpoint %+v: want an overlap past its LSN", done)
	}
	db.Exec(t, `INSERT INTO t VALUES (6000, 1)`) // after the resumed copy: a plain insert
	var now string
	db.QueryRow(t, []any{&now}, `SELECT pg_current_wal_lsn()::text`)
	want, err := pglogrepl.ParseLSN(now)
	if err != nil {
		t.Fatal(err)
	}
	for {
		c, err := p.step(time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		collect(c)
		if pos := position(t, c.cp.Position); c.cp.Idle && pos.LSNValue() >= want {
			break
		}
	}
	if got := ops[5000]; len(got) != 2 || got[0] != change.OpRead || got[1] != change.OpUpdate {
		t.Fatalf("id 5000: ops %v, want read (the resumed copy) then update (the replayed insert)", got)
	}
	if got := ops[6000]; len(got) != 1 || got[0] != change.OpInsert {
		t.Fatalf("id 6000: ops %v, want one insert", got)
	}
	if got := position(t, p.last); got.Overlap != "" {
		t.Fatalf("checkpoint %+v past the overlap still carries it", got)
	}
	sameRows(t, db, "public.t", "replica.t")
}
