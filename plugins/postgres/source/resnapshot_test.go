package source

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/jackc/pgx/v5"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// folded is an Emitter that folds what a Read sends into the (id, v) rows a destination would hold, re-snapshot
// marks included: at an end mark the rows not received since the begin mark go.
type folded struct {
	mu      sync.Mutex
	rows    map[string]map[int32]int32
	seen    map[string]map[int32]bool // per stream since its begin mark
	marks   []string
	last    []byte   // the last checkpoint's position
	all     [][]byte // every checkpoint's position, in order
	idle    bool     // the last checkpoint said idle
	reads   int      // snapshot reads received during the re-snapshot
	changed chan struct{}
	// metrics are the last checkpoint's gauges; truncated the streams of the truncates received, in order.
	metrics   []serve.Metric
	truncated []string
	// captured are the captured_table gauges of the last checkpoint that carried them.
	captured []serve.Metric
}

func newFolded() *folded {
	return &folded{rows: map[string]map[int32]int32{}, seen: map[string]map[int32]bool{}, changed: make(chan struct{}, 1)}
}

func (f *folded) Batch(_ context.Context, stream string, rec arrow.RecordBatch) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	ops, err := change.Ops(rec)
	if err != nil {
		return err
	}
	ids, vs := rec.Column(0).(*array.Int32), rec.Column(1).(*array.Int32)
	if f.rows[stream] == nil {
		f.rows[stream] = map[int32]int32{}
	}
	rows, seen := f.rows[stream], f.seen[stream]
	for i := range int(rec.NumRows()) {
		id := ids.Value(i)
		if seen != nil {
			seen[id] = true
			if change.Op(ops.Value(i)) == change.OpRead {
				f.reads++
			}
		}
		if change.Op(ops.Value(i)) == change.OpDelete {
			delete(rows, id)
		} else {
			rows[id] = vs.Value(i)
		}
	}
	return nil
}
func (f *folded) SchemaChange(context.Context, serve.Stream) error { return nil }
func (f *folded) Truncate(_ context.Context, stream string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.truncated = append(f.truncated, stream)
	return nil
}
func (f *folded) Resnapshot(_ context.Context, stream string, end bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.marks = append(f.marks, fmt.Sprintf("%s end=%v", stream, end))
	if !end {
		f.seen[stream] = map[int32]bool{}
		return nil
	}
	for id := range f.rows[stream] {
		if !f.seen[stream][id] {
			delete(f.rows[stream], id)
		}
	}
	delete(f.seen, stream)
	return nil
}
func (f *folded) Checkpoint(_ context.Context, cp serve.Checkpoint) error {
	f.mu.Lock()
	f.last, f.idle = cp.Position, cp.Idle
	f.all = append(f.all, cp.Position)
	if slices.ContainsFunc(cp.Metrics, func(m serve.Metric) bool { return m.Name == "captured_table" }) {
		f.captured = slices.DeleteFunc(slices.Clone(cp.Metrics), func(m serve.Metric) bool { return m.Name != "captured_table" })
	}
	f.metrics = cp.Metrics
	f.mu.Unlock()
	select {
	case f.changed <- struct{}{}:
	default:
	}
	return nil
}

// readUntil runs s.Read until done says so at a checkpoint (or the Read fails).
func readUntil(t *testing.T, s *Source, req serve.ReadRequest, out *folded, done func() bool) {
	t.Helper()
	readUntilWith(t, s, req, out, out, done)
}

// readUntilWith is readUntil with an Emitter of its own that reports to out.
func readUntilWith(t *testing.T, s *Source, req serve.ReadRequest, em serve.Emitter, out *folded, done func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- s.Read(ctx, req, em) }()
	for {
		select {
		case err := <-errc:
			t.Fatalf("read ended: %v", err)
		case <-ctx.Done():
			t.Fatal("timed out")
		case <-out.changed:
			out.mu.Lock()
			ok := done()
			out.mu.Unlock()
			if ok {
				cancel()
				if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
					t.Fatal(err)
				}
				return
			}
		}
	}
}

// TestResnapshotDropsRowsChangedBetweenWatermarks: between each chunk's select and its high watermark the test
// updates one row of the chunk and deletes another, so the chunk holds them as they were before. Folded in
// order, what the source sends must equal the table: the chunk's stale copies of both are dropped (the changes
// come through the log), rows gone before the re-snapshot are removed at its end, and every other row arrives as
// a snapshot read.
func TestResnapshotDropsRowsChangedBetweenWatermarks(t *testing.T) {
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL); INSERT INTO t SELECT g, g FROM generate_series(1, 500) g`)
	raw, _ := json.Marshal(map[string]any{"host": db.Server.Host, "port": db.Server.Port, "user": "postgres", "database": db.Name,
		"sslmode": "disable", "tables": []string{"public.t"}, "batch_size": 60, "slot": "rs_" + db.Name, "publication": "rs_" + db.Name})
	s := New()
	out := newFolded()
	readUntil(t, s, serve.ReadRequest{Settings: raw}, out, func() bool { return out.idle })
	from := out.last

	// Rows the destination holds but the source lost without a change in the log (as if deleted downstream of a
	// broken pipeline): the re-snapshot's end must remove them.
	out.rows["public.t"][100000], out.rows["public.t"][100001] = 1, 2
	conn := db.Connect(t)
	changed := 0
	s.chunkRead = func(ctx context.Context, table string, keys []string) {
		if len(keys) < 2 {
			return
		}
		if _, err := conn.Exec(ctx, `WITH u AS (UPDATE t SET v = v + 1000 WHERE id = $1::int) DELETE FROM t WHERE id = $2::int`, keys[0], keys[1]); err != nil {
			t.Errorf("change between the watermarks: %v", err)
		}
		changed++
	}
	readUntil(t, s, serve.ReadRequest{Settings: raw, Checkpoint: from, Resnapshot: []string{"public.t"}}, out, func() bool {
		return len(out.marks) == 2 && out.idle
	})
	if fmt.Sprint(out.marks) != "[public.t end=false public.t end=true]" {
		t.Fatalf("marks %v", out.marks)
	}
	if changed < 5 || out.reads < 300 {
		t.Fatalf("%d chunks changed, %d snapshot reads: the test tests nothing", changed, out.reads)
	}
	sameRows(t, conn, "t", out.rows["public.t"])
}

// sameRows compares table's (id, v) rows with got.
func sameRows(t *testing.T, conn *pgx.Conn, table string, got map[int32]int32) {
	t.Helper()
	want := map[int32]int32{}
	rows, err := conn.Query(context.Background(), `SELECT id, v FROM `+table)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, v int32
		if err := rows.Scan(&id, &v); err != nil {
			t.Fatal(err)
		}
		want[id] = v
	}
	if len(want) != len(got) {
		t.Errorf("table %s has %d rows, the folded output %d", table, len(want), len(got))
	}
	for id, v := range want {
		if g, ok := got[id]; !ok || g != v {
			t.Errorf("%s id %d: table %d, folded output %d (present %v)", table, id, v, g, ok)
		}
	}
	for id := range got {
		if _, ok := want[id]; !ok {
			t.Errorf("%s id %d: not in the table, but in the folded output", table, id)
		}
	}
}

// TestTableAddedWhileStreaming: a table added to tables: of a running pipeline is added to the publication and
// copied between the begin and end marks while the first table keeps streaming; both then stream.
func TestTableAddedWhileStreaming(t *testing.T) {
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL); INSERT INTO t SELECT g, g FROM generate_series(1, 100) g;
		CREATE TABLE u (id int PRIMARY KEY, v int NOT NULL); INSERT INTO u SELECT g, -g FROM generate_series(1, 300) g`)
	set := func(tables ...string) json.RawMessage {
		raw, _ := json.Marshal(map[string]any{"host": db.Server.Host, "port": db.Server.Port, "user": "postgres", "database": db.Name,
			"sslmode": "disable", "tables": tables, "batch_size": 70, "slot": "add_" + db.Name, "publication": "add_" + db.Name})
		return raw
	}
	s := New()
	out := newFolded()
	readUntil(t, s, serve.ReadRequest{Settings: set("public.t")}, out, func() bool { return out.idle })
	if out.rows["public.u"] != nil {
		t.Fatal("u was read before it was configured")
	}
	db.Exec(t, `UPDATE t SET v = v + 1 WHERE id <= 10; UPDATE u SET v = 0 WHERE id <= 5`)
	conn := db.Connect(t)
	s.chunkRead = func(ctx context.Context, table string, keys []string) {
		if len(keys) == 0 {
			return
		}
		if _, err := conn.Exec(ctx, `UPDATE u SET v = v * 10 WHERE id = $1::int`, keys[0]); err != nil {
			t.Errorf("change during the copy: %v", err)
		}
	}
	readUntil(t, s, serve.ReadRequest{Settings: set("public.t", "public.u"), Checkpoint: out.last}, out, func() bool {
		return len(out.marks) == 2 && out.idle
	})
	if fmt.Sprint(out.marks) != "[public.u end=false public.u end=true]" {
		t.Fatalf("marks %v", out.marks)
	}
	s.chunkRead = nil
	db.Exec(t, `UPDATE u SET v = 7 WHERE id = 300; DELETE FROM t WHERE id = 1`)
	out.idle = false
	readUntil(t, s, serve.ReadRequest{Settings: set("public.t", "public.u"), Checkpoint: out.last}, out, func() bool { return out.idle })
	sameRows(t, conn, "t", out.rows["public.t"])
	sameRows(t, conn, "u", out.rows["public.u"])
}

// TestTableAddedAfterSnapshotWithoutItsClosingCheckpoint: the engine commits a checkpoint with the rows it
// covers, so a snapshot's closing checkpoint (no rows) may never become durable — a `sync --once` that copied
// everything and then saw no change ends on the last chunk's checkpoint, still in the snapshot phase. A table
// added to the settings next must be copied while streaming, as after any finished snapshot, not refused as if
// the snapshot were still running.
func TestTableAddedAfterSnapshotWithoutItsClosingCheckpoint(t *testing.T) {
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL); INSERT INTO t SELECT g, g FROM generate_series(1, 100) g;
		CREATE TABLE u (id int PRIMARY KEY, v int NOT NULL); INSERT INTO u SELECT g, -g FROM generate_series(1, 300) g`)
	set := func(tables ...string) json.RawMessage {
		raw, _ := json.Marshal(map[string]any{"host": db.Server.Host, "port": db.Server.Port, "user": "postgres", "database": db.Name,
			"sslmode": "disable", "tables": tables, "batch_size": 70, "slot": "lost_" + db.Name, "publication": "lost_" + db.Name})
		return raw
	}
	s := New()
	out := newFolded()
	readUntil(t, s, serve.ReadRequest{Settings: set("public.t")}, out, func() bool { return out.idle })
	var midChunk, lastChunk []byte
	for _, cp := range out.all {
		if p, err := DecodePosition(cp); err == nil && p.Phase == PhaseSnapshot {
			if midChunk == nil && !p.copiedAll() {
				midChunk = cp
			}
			lastChunk = cp
		}
	}
	if p, err := DecodePosition(lastChunk); err != nil || p == nil || !p.copiedAll() {
		t.Fatalf("the last snapshot-phase checkpoint should have every table copied: %s (%v)", lastChunk, err)
	}
	// A snapshot that really was cut short cannot take a new table: a person must act, so no retry can help.
	if midChunk == nil {
		t.Fatalf("no snapshot-phase checkpoint before the end of the copy (batch_size 70, 100 rows): %q", out.all)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.Read(ctx, serve.ReadRequest{Settings: set("public.t", "public.u"), Checkpoint: midChunk}, newFolded()); !errors.Is(err, fault.ErrConfig) ||
		!strings.Contains(err.Error(), "the tables changed while the initial snapshot was running") {
		t.Fatalf("a table added while the snapshot is unfinished: %v, want a config fault", err)
	}
	db.Exec(t, `UPDATE t SET v = v + 1 WHERE id <= 10; UPDATE u SET v = 0 WHERE id <= 5`)
	readUntil(t, s, serve.ReadRequest{Settings: set("public.t", "public.u"), Checkpoint: lastChunk}, out, func() bool {
		return len(out.marks) == 2 && out.idle
	})
	conn := db.Connect(t)
	sameRows(t, conn, "t", out.rows["public.t"])
	sameRows(t, conn, "u", out.rows["public.u"])
}
