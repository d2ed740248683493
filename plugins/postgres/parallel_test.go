package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
	"github.com/skippr-dev/skippr/plugins/postgres/source"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// TestSnapshotCopiesTablesInParallel copies five tables three at a time. The chunks go out in a fixed round
// (a b c a b c …, then d and e as a, b and c finish), so replays reach the same checkpoints, and e, read only
// once b is done, is copied as it was when the copy began, not as it was changed since.
// (TestParallelReadersShareTheSnapshot in package source checks that each reader imports the snapshot.)
func TestSnapshotCopiesTablesInParallel(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	names := []string{"a", "b", "c", "d", "e"}
	for _, n := range names[:3] {
		// 24 MB each, more than gRPC's window and the sockets hold: while this test does not read, the
		// plugin cannot finish b, so e is not read yet when it changes below.
		db.Exec(t, fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, v int NOT NULL, pad text); ALTER TABLE %[1]s ALTER pad SET STORAGE EXTERNAL;
			INSERT INTO %[1]s SELECT g, 0, repeat('x', 12000) FROM generate_series(1, 2000) g`, n))
	}
	for _, n := range names[3:] {
		db.Exec(t, fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, v int NOT NULL); INSERT INTO %[1]s SELECT g, 0 FROM generate_series(1, 1000) g`, n))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rs, err := startPlugin(t).Read(ctx, settings(db, map[string]any{"tables": names, "slot": slot(db), "batch_size": 100, "snapshot_parallel": 3}), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// next returns the batches up to the next checkpoint.
	next := func() ([]protocol.Batch, *source.Position) {
		t.Helper()
		var batches []protocol.Batch
		for {
			m, err := rs.Next()
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			switch {
			case m.Batch != nil:
				batches = append(batches, *m.Batch)
			case m.Checkpoint != nil:
				return batches, position(t, m.Checkpoint.Position)
			}
		}
	}
	batches, pos := next()
	var readingE int
	db.QueryRow(t, []any{&readingE}, `SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%"e" ORDER BY%' AND pid <> pg_backend_pid()`)
	if readingE != 0 {
		t.Fatal("e is being read already: the test cannot tell whether its reader uses the slot's snapshot")
	}
	db.Exec(t, `UPDATE b SET v = 1; INSERT INTO b VALUES (2001, 1); UPDATE e SET v = 1; INSERT INTO e VALUES (1001, 1)`)

	var order []string
	rows := map[string]map[int32]int32{}
	for pos.Phase == source.PhaseSnapshot {
		order = append(order, strings.TrimPrefix(pos.Table, "public."))
		for _, b := range batches {
			recs, _, err := protocol.DecodeRecords(memory.DefaultAllocator, b.IPC)
			if err != nil {
				t.Fatal(err)
			}
			for _, rec := range recs {
				ids, vs := rec.Column(rec.Schema().FieldIndices("id")[0]).(*array.Int32), rec.Column(rec.Schema().FieldIndices("v")[0]).(*array.Int32)
				m := rows[b.Stream]
				if m == nil {
					m = map[int32]int32{}
					rows[b.Stream] = m
				}
				for i := range int(rec.NumRows()) {
					if _, dup := m[ids.Value(i)]; dup {
						t.Fatalf("%s: id %d copied twice", b.Stream, ids.Value(i))
					}
					m[ids.Value(i)] = vs.Value(i)
				}
				rec.Release()
			}
		}
		batches, pos = next()
	}

	var want []string
	for range 20 {
		want = append(want, "a", "b", "c")
	}
	for range 10 {
		want = append(want, "d", "e")
	}
	if !slices.Equal(order, want) {
		t.Errorf("chunks came from tables\n%v\nwant\n%v", order, want)
	}
	for i, n := range names {
		m, want := rows["public."+n], int32(2000)
		if i >= 3 {
			want = 1000
		}
		if len(m) != int(want) {
			t.Errorf("%s: %d rows copied, want %d", n, len(m), want)
		}
		for id, v := range m {
			if id < 1 || id > want || v != 0 {
				t.Errorf("%s: copied row (%d, %d): the copy saw a change made after the slot's snapshot", n, id, v)
				break
			}
		}
	}
}

// TestParallelSnapshotResumesEachTable kills the plugin while two tables are half copied, then resumes: each
// table continues from its own last key, and the destination ends equal to the source.
func TestParallelSnapshotResumesEachTable(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	for _, n := range []string{"a", "b", "c"} {
		db.Exec(t, fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, v text NOT NULL); INSERT INTO %[1]s SELECT g, 'v' || g FROM generate_series(1, 3000) g`, n))
	}
	srcSet := settings(db, map[string]any{"tables": []string{"a", "b", "c"}, "slot": slot(db), "batch_size": 500, "snapshot_parallel": 2})
	src := startPlugin(t)
	p := newPipe(t, src, startPlugin(t), srcSet, settings(db, map[string]any{"schema": "replica"}))
	p.start()
	var last *source.Position
	for range 4 { // a b a b
		c, err := p.step(time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		last = position(t, c.cp.Position)
	}
	if pa, pb := last.Progress["public.a"], last.Progress["public.b"]; pa.Rows != 1000 || pb.Rows != 1000 || pa.Done || pb.Done {
		t.Fatalf("after four chunks: %s, want a and b each 1000 rows in", last.Encode())
	}
	kill(t, src)
	db.Exec(t, `UPDATE a SET v = 'changed' WHERE id IN (10, 2990); DELETE FROM b WHERE id = 2500; INSERT INTO c VALUES (3001, 'late')`)

	p.src = startPlugin(t)
	p.start()
	p.catchUp(db, time.Minute)
	for _, n := range []string{"a", "b", "c"} {
		sameRows(t, db, "public."+n, "replica."+n)
	}
}

// TestParallelSnapshotReplaysByteForByte reads a three-table copy twice: the second time from a checkpoint in
// the middle of a round. Both reach the same checkpoints, byte for byte (but for overlap), in the same order.
func TestParallelSnapshotReplaysByteForByte(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	for i, n := range []string{"a", "b", "c"} {
		db.Exec(t, fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, v int NOT NULL); INSERT INTO %[1]s SELECT g, g FROM generate_series(1, %d) g`, n, 300+i*100))
	}
	set := settings(db, map[string]any{"tables": []string{"a", "b", "c"}, "slot": slot(db), "batch_size": 100, "snapshot_parallel": 2})
	src := startPlugin(t)
	// snapshot returns the snapshot phase's checkpoints of a read from cp.
	snapshot := func(cp []byte) [][]byte {
		r := startReading(t, src, set, cp)
		defer r.stop()
		var cps [][]byte
		for {
			c := r.mustNext(time.Minute)
			if position(t, c.cp.Position).Phase != source.PhaseSnapshot {
				return cps
			}
			cps = append(cps, c.cp.Position)
		}
	}
	first := snapshot(nil)
	if len(first) != 12 { // 3 + 4 + 5 chunks
		t.Fatalf("first read: %d snapshot checkpoints, want 12", len(first))
	}
	// The chunks go a b a b a b b c c c c c: from a's last chunk the round continues with b; from b's third,
	// a's turn finds it done and c joins.
	for _, from := range []int{4, 5} {
		second := snapshot(first[from])
		if len(second) != len(first)-from-1 {
			t.Fatalf("replay from checkpoint %d: %d checkpoints, want %d", from, len(second), len(first)-from-1)
		}
		for i, cp := range second {
			// A resumed copy records overlap when the server's WAL moved since the slot's start (other tests
			// write to this server); everything else must be byte for byte what the first read reached.
			p := position(t, cp)
			p.Overlap = ""
			if string(p.Encode()) != string(first[from+1+i]) {
				t.Fatalf("replay from checkpoint %d, checkpoint %d:\n%s\nfirst read:\n%s", from, i, cp, first[from+1+i])
			}
		}
	}
}
