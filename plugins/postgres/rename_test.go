package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// TestRenameColumnWhileStreaming: RENAME COLUMN at the source, between changes of a writer, reaches the
// destination as a rename (the Relation message's column at the same position, same type, new name): the rows
// written before keep their values under the new name, the old column is gone. The checkpoint holding the
// rename applied a second time (a re-read after a restart) changes nothing. Without the rename detection the
// destination gains column b beside a, and the rows untouched since hold NULL in b.
func TestRenameColumnWhileStreaming(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE TABLE t (id int PRIMARY KEY, a text, c int NOT NULL DEFAULT 0);
		INSERT INTO t SELECT g, 'v' || g, 0 FROM generate_series(1, 2000) g`)
	src, dst := startPlugin(t), startPlugin(t)
	p := newPipe(t, src, dst, settings(db, map[string]any{"tables": []string{"t"}, "slot": slot(db)}), settings(db, map[string]any{"schema": "replica"}))
	p.start()
	p.catchUp(db, time.Minute)

	// A writer that does not name the renamed column runs across the rename.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		conn := db.Connect(t)
		rng := rand.New(rand.NewPCG(5, 6))
		for next := 3000; ctx.Err() == nil; next++ {
			q := fmt.Sprintf("UPDATE t SET c = c + 1 WHERE id = %d", 1+rng.IntN(2000))
			if next%3 == 0 {
				q = fmt.Sprintf("INSERT INTO t (id, c) VALUES (%d, 1)", next)
			}
			if _, err := conn.Exec(ctx, q); err != nil && ctx.Err() == nil {
				t.Errorf("writer: %s: %v", q, err)
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	time.Sleep(300 * time.Millisecond)
	db.Exec(t, `ALTER TABLE t RENAME COLUMN a TO b`)
	db.Exec(t, `UPDATE t SET b = b || '!' WHERE id % 10 = 0`)
	time.Sleep(300 * time.Millisecond)
	cancel()
	<-done

	// Apply up to the chunk that announces the rename, then the same chunk once more.
	deadline := time.Now().Add(time.Minute)
	for renamed := false; !renamed; {
		c, err := p.step(time.Until(deadline))
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range c.items {
			if it.Schema == nil {
				continue
			}
			sc, err := protocol.DecodeSchema(memory.DefaultAllocator, it.Schema.ArrowSchema)
			if err != nil {
				t.Fatal(err)
			}
			if i := sc.FieldIndices("b"); len(i) == 1 {
				if from := change.RenamedFrom(sc.Field(i[0])); from != "a" {
					t.Fatalf("column b is announced as renamed from %q, want a: %s", from, sc)
				}
				renamed = true
			}
		}
		if renamed {
			p.seq++
			if _, err := p.dst.Apply(context.Background(), p.dstSet, p.pipeline, p.seq, c.items); err != nil {
				t.Fatalf("the rename's chunk applied again: %v", err)
			}
		}
	}
	p.catchUp(db, time.Minute)
	sameRows(t, db, "public.t", "replica.t")
	var cols string
	db.QueryRow(t, []any{&cols}, `SELECT string_agg(attname, ',' ORDER BY attnum) FROM pg_attribute
		WHERE attrelid = 'replica.t'::regclass AND attnum > 0 AND NOT attisdropped`)
	if cols != "id,b,c" {
		t.Errorf("replica.t has columns %s, want id,b,c", cols)
	}
}

// TestRenameColumnWhileStopped: a RENAME COLUMN made while no Read runs, before the table's next change, is
// still carried as a rename: the restarted Read's first Relation message is compared with the columns its
// checkpoint keeps. Without them the first Relation message has nothing to compare with and the destination
// gains b as a new column, NULL in the rows untouched since.
func TestRenameColumnWhileStopped(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE TABLE t (id int PRIMARY KEY, a text); INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 100) g`)
	srcSet := settings(db, map[string]any{"tables": []string{"t"}, "slot": slot(db)})
	src := startPlugin(t)
	p := newPipe(t, src, startPlugin(t), srcSet, settings(db, map[string]any{"schema": "replica"}))
	p.start()
	p.catchUp(db, time.Minute)
	db.Exec(t, `UPDATE t SET a = a || '+' WHERE id <= 3`) // a Relation message in this Read
	p.catchUp(db, time.Minute)
	kill(t, src)

	db.Exec(t, `ALTER TABLE t RENAME COLUMN a TO b`)
	db.Exec(t, `UPDATE t SET b = b || '!' WHERE id = 5`)
	p.src = startPlugin(t)
	p.start()
	p.catchUp(db, time.Minute)
	sameRows(t, db, "public.t", "replica.t")
	var cols string
	db.QueryRow(t, []any{&cols}, `SELECT string_agg(attname, ',' ORDER BY attnum) FROM pg_attribute
		WHERE attrelid = 'replica.t'::regclass AND attnum > 0 AND NOT attisdropped`)
	if cols != "id,b" {
		t.Errorf("replica.t has columns %s, want id,b", cols)
	}
}
