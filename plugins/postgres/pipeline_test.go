package main

import (
	"testing"
	"time"

	"github.com/skippr-dev/skippr/plugins/postgres/source"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// TestSnapshotWithConcurrentWrites copies a table while it is being written to, then streams; the
// destination must end up equal to the source, row by row.
func TestSnapshotWithConcurrentWrites(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE TABLE accounts (id int PRIMARY KEY, owner text NOT NULL, balance numeric(12,2), tags text[], updated timestamptz);
		ALTER TABLE accounts REPLICA IDENTITY FULL;
		CREATE TABLE events (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, account int, kind text);
		ALTER TABLE events REPLICA IDENTITY FULL;
		INSERT INTO accounts SELECT g, 'owner ' || g, g * 10.25, ARRAY['a' || g, NULL], '2024-01-01'::timestamptz + g * interval '1 minute'
		FROM generate_series(1, 20000) g;
		INSERT INTO events (account, kind) SELECT g % 100, 'open' FROM generate_series(1, 3000) g;
		ANALYZE accounts; ANALYZE events`)
	src, dst := startPlugin(t), startPlugin(t)
	srcSet := settings(db, map[string]any{"tables": []string{"accounts", "public.events"}, "slot": slot(db), "batch_size": 1000})
	dstSet := settings(db, map[string]any{"schema": "replica"})
	p := newPipe(t, src, dst, srcSet, dstSet)
	p.start()

	// The first chunk comes from the snapshot; write while the rest of it is read.
	c, err := p.step(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if pos := position(t, c.cp.Position); pos.Phase != source.PhaseSnapshot || c.rows != 1000 {
		t.Fatalf("first checkpoint: phase %s after %d rows, want a snapshot chunk of 1000 rows", pos.Phase, c.rows)
	}
	if c.cp.RowsDone != 1000 || c.cp.RowsTotal < 22000 || c.cp.RowsTotal > 24000 {
		t.Errorf("first checkpoint's progress: %d of %d rows, want 1000 of about 23000", c.cp.RowsDone, c.cp.RowsTotal)
	}
	db.Exec(t, `UPDATE accounts SET balance = balance + 1, updated = now() WHERE id % 7 = 0;
		DELETE FROM accounts WHERE id % 11 = 0;
		INSERT INTO accounts SELECT g, 'late ' || g, 1, '{}', now() FROM generate_series(20001, 20500) g;
		UPDATE accounts SET id = id + 100000 WHERE id BETWEEN 5 AND 9;
		INSERT INTO events (account, kind) SELECT g % 100, 'late' FROM generate_series(1, 500) g`)
	snapshotChunks, sawStream := 1, false
	for !sawStream {
		c, err := p.step(time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if pos := position(t, c.cp.Position); pos.Phase == source.PhaseSnapshot {
			snapshotChunks++
		} else {
			sawStream = true
			// Streaming checkpoints carry the count on from the snapshot, in the position too, so a
			// resumed run (and `skippr status`) shows progress instead of nothing.
			if c.cp.RowsDone < 23000 || pos.Rows != c.cp.RowsDone {
				t.Errorf("first streaming checkpoint: rows_done %d, position rows %d; want the same, at least the 23000 copied", c.cp.RowsDone, pos.Rows)
			}
		}
	}
	if snapshotChunks < 20 {
		t.Errorf("snapshot took %d chunks, want at least 20 (23000 rows in chunks of 1000)", snapshotChunks)
	}
	// More changes once streaming, in several transactions and one that touches both tables.
	db.Exec(t, `BEGIN; UPDATE accounts SET owner = owner || '!' WHERE id < 100; INSERT INTO events (account, kind) VALUES (1, 'x'); COMMIT;
		DELETE FROM events WHERE id % 3 = 0;
		UPDATE accounts SET tags = ARRAY['x,y', 'q"uote', 'back\slash'] WHERE id = 1`)
	p.catchUp(db, time.Minute)
	sameRows(t, db, "public.accounts", "replica.accounts")
	sameRows(t, db, "public.events", "replica.events")
}
