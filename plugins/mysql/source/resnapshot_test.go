package source

import (
	"context"
	"database/sql"
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
	_ "github.com/go-sql-driver/mysql"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/testkit/mysqltest"
)

func TestMain(m *testing.M) { mysqltest.Main(m) }

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
	metrics []serve.Metric
	changed chan struct{}
	// truncated are the streams of the truncates received, in order.
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
	if len(cp.Metrics) > 0 {
		f.metrics = cp.Metrics
	}
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
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- s.Read(ctx, req, out) }()
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

// sameRows compares table's (id, v) rows with got.
func sameRows(t *testing.T, db *sql.DB, table string, got map[int32]int32) {
	t.Helper()
	want := map[int32]int32{}
	rows, err := db.Query(`SELECT id, v FROM ` + table)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
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

// TestResnapshotDropsRowsChangedBetweenWatermarks: between each chunk's select and its high watermark the test
// updates one row of the chunk and deletes another, so the chunk holds them as they were before. Folded in
// order, what the source sends must equal the table: the chunk's stale copies of both are dropped (the changes
// come through the binary log), rows gone before the re-snapshot are removed at its end, and every other row
// arrives as a snapshot read. The Read is stopped halfway and resumed from its last checkpoint, which must carry
// the copy on from the last key copied; the watermark table is created on first use, and its rows never reach
// the output.
func TestResnapshotDropsRowsChangedBetweenWatermarks(t *testing.T) {
	db := mysqltest.NewDB(t)
	db.Exec(t, `CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL)`)
	db.Exec(t, `INSERT INTO t SELECT seq, seq FROM seq_1_to_500`)
	raw, _ := json.Marshal(map[string]any{"host": db.Server.Host, "port": db.Server.Port, "user": "root", "database": db.Name,
		"tables": []string{"t"}, "batch_size": 60})
	stream := db.Name + ".t"
	s := New()
	out := newFolded()
	readUntil(t, s, serve.ReadRequest{Settings: raw}, out, func() bool { return out.idle })
	if len(out.rows[stream]) != 500 {
		t.Fatalf("snapshot: %d rows", len(out.rows[stream]))
	}

	// Rows the destination holds but the source lost without a change in the log (as if deleted downstream of a
	// broken pipeline): the re-snapshot's end must remove them.
	out.rows[stream][100000], out.rows[stream][100001] = 1, 2
	conn := db.Open(t)
	changed := 0
	s.chunkRead = func(ctx context.Context, table string, keys []string) {
		if len(keys) < 2 {
			return
		}
		k0, k1 := strings.ReplaceAll(keys[0], "\x00", ""), strings.ReplaceAll(keys[1], "\x00", "")
		if _, err := conn.ExecContext(ctx, `UPDATE t SET v = v + 1000 WHERE id = `+k0); err != nil {
			t.Errorf("change between the watermarks: %v", err)
		}
		if _, err := conn.ExecContext(ctx, `DELETE FROM t WHERE id = `+k1); err != nil {
			t.Errorf("change between the watermarks: %v", err)
		}
		changed++
	}
	// Halfway, then resumed from the last checkpoint (a kill loses what followed it).
	readUntil(t, s, serve.ReadRequest{Settings: raw, Checkpoint: out.last, Resnapshot: []string{stream}}, out, func() bool {
		p, err := DecodePosition(out.last)
		return err == nil && p.Resnapshot[stream].Rows >= 150
	})
	mid := position(t, out.last).Resnapshot[stream]
	if !mid.Begun || len(mid.Key) != 1 || mid.Total == 0 {
		t.Fatalf("progress in the checkpoint: %+v", mid)
	}
	copyGauges := slices.DeleteFunc(slices.Clone(out.metrics), func(m serve.Metric) bool { return m.Name == "captured_table" })
	if len(copyGauges) != 2 || copyGauges[0].Name != "resnapshot_rows" || copyGauges[0].Labels["table"] != stream {
		t.Fatalf("metrics: %+v", out.metrics)
	}
	readUntil(t, s, serve.ReadRequest{Settings: raw, Checkpoint: out.last}, out, func() bool {
		return len(out.marks) == 2 && out.idle
	})
	if want := fmt.Sprintf("[%s end=false %s end=true]", stream, stream); fmt.Sprint(out.marks) != want {
		t.Fatalf("marks %v, want %s", out.marks, want)
	}
	if changed < 5 || out.reads < 300 {
		t.Fatalf("%d chunks changed, %d snapshot reads: the test tests nothing", changed, out.reads)
	}
	if p := position(t, out.last); p.Resnapshot != nil {
		t.Fatalf("progress left after the end: %+v", p.Resnapshot)
	}
	if _, ok := out.rows[db.Name+"."+watermarkTable]; ok {
		t.Fatal("watermark rows reached the output")
	}
	sameRows(t, conn, "t", out.rows[stream])

	// Changes after the re-snapshot stream as before.
	s.chunkRead = nil
	db.Exec(t, `UPDATE t SET v = 7 WHERE id = 500`)
	db.Exec(t, `DELETE FROM t WHERE id = 499`)
	out.idle = false
	readUntil(t, s, serve.ReadRequest{Settings: raw, Checkpoint: out.last}, out, func() bool { return out.idle })
	sameRows(t, conn, "t", out.rows[stream])
}

// TestResnapshotWatermarkGrant: a user who may read the tables but not create the watermark table gets a
// configuration error naming the CREATE TABLE and the GRANT that fix it; once an administrator has created the
// table and granted INSERT, UPDATE, the re-snapshot runs.
func TestResnapshotWatermarkGrant(t *testing.T) {
	db := mysqltest.NewDB(t)
	db.Exec(t, `CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL)`)
	db.Exec(t, `INSERT INTO t SELECT seq, seq FROM seq_1_to_30`)
	u := db.Server.CreateUser(t, "SELECT ON `"+db.Name+"`.*", "REPLICATION SLAVE, BINLOG MONITOR ON *.*")
	raw, _ := json.Marshal(map[string]any{"host": db.Server.Host, "port": db.Server.Port, "user": u.Name, "password": u.Password,
		"database": db.Name, "tables": []string{"t"}, "batch_size": 20})
	stream := db.Name + ".t"
	s := New()
	out := newFolded()
	readUntil(t, s, serve.ReadRequest{Settings: raw}, out, func() bool { return out.idle })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := s.Read(ctx, serve.ReadRequest{Settings: raw, Checkpoint: out.last, Resnapshot: []string{stream}}, out)
	if err == nil || !strings.Contains(err.Error(), "create the watermark table") {
		t.Fatalf("read without the grant: %v", err)
	}
	msg := fmt.Sprint(err) + " " + fault.FixOf(err)
	for _, want := range []string{"CREATE TABLE IF NOT EXISTS `" + db.Name + "`.`skippr_watermarks`", "GRANT INSERT, UPDATE ON `" + db.Name + "`.`skippr_watermarks` TO '" + u.Name + "'"} {
		if !strings.Contains(msg, want) {
			t.Fatalf("the error does not name %q:\n%s", want, msg)
		}
	}
	db.Exec(t, watermarkDDL(db.Name))
	db.Server.Exec(t, "GRANT INSERT, UPDATE ON `"+db.Name+"`.`skippr_watermarks` TO '"+u.Name+"'@'127.0.0.1'")
	readUntil(t, s, serve.ReadRequest{Settings: raw, Checkpoint: out.last, Resnapshot: []string{stream}}, out, func() bool {
		return len(out.marks) == 2 && out.idle
	})
	sameRows(t, db.Open(t), "t", out.rows[stream])
}

func position(t *testing.T, b []byte) *Position {
	t.Helper()
	p, err := DecodePosition(b)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestTableAddedWhileStreaming: a table added to tables: of a running pipeline is copied between begin and end
// marks while the first table keeps streaming (changes of both during the copy included); both then stream. A
// table removed from the settings is still refused.
func TestTableAddedWhileStreaming(t *testing.T) {
	db := mysqltest.NewDB(t)
	db.Exec(t, `CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL)`)
	db.Exec(t, `INSERT INTO t SELECT seq, seq FROM seq_1_to_100`)
	db.Exec(t, `CREATE TABLE u (id int PRIMARY KEY, v int NOT NULL)`)
	db.Exec(t, `INSERT INTO u SELECT seq, -seq FROM seq_1_to_300`)
	set := func(tables ...string) json.RawMessage {
		raw, _ := json.Marshal(map[string]any{"host": db.Server.Host, "port": db.Server.Port, "user": "root", "database": db.Name,
			"tables": tables, "batch_size": 70})
		return raw
	}
	ts, us := db.Name+".t", db.Name+".u"
	s := New()
	out := newFolded()
	readUntil(t, s, serve.ReadRequest{Settings: set("t")}, out, func() bool { return out.idle })
	if out.rows[us] != nil {
		t.Fatal("u was read before it was configured")
	}
	db.Exec(t, `UPDATE t SET v = v + 1 WHERE id <= 10`)
	db.Exec(t, `UPDATE u SET v = 0 WHERE id <= 5`)
	conn := db.Open(t)
	s.chunkRead = func(ctx context.Context, table string, keys []string) {
		if len(keys) == 0 {
			return
		}
		if _, err := conn.ExecContext(ctx, `UPDATE u SET v = v * 10 WHERE id = `+keys[0]); err != nil {
			t.Errorf("change during the copy: %v", err)
		}
		if _, err := conn.ExecContext(ctx, `UPDATE t SET v = v + 5 WHERE id = 50`); err != nil {
			t.Errorf("change during the copy: %v", err)
		}
	}
	readUntil(t, s, serve.ReadRequest{Settings: set("t", "u"), Checkpoint: out.last}, out, func() bool {
		return len(out.marks) == 2 && out.idle
	})
	if want := fmt.Sprintf("[%s end=false %s end=true]", us, us); fmt.Sprint(out.marks) != want {
		t.Fatalf("marks %v, want %s", out.marks, want)
	}
	if p := position(t, out.last); fmt.Sprint(p.Tables) != "[t u]" || p.Resnapshot != nil {
		t.Fatalf("position after the copy: tables %v, resnapshot %v", p.Tables, p.Resnapshot)
	}
	s.chunkRead = nil
	db.Exec(t, `UPDATE u SET v = 7 WHERE id = 300`)
	db.Exec(t, `DELETE FROM t WHERE id = 1`)
	out.idle = false
	readUntil(t, s, serve.ReadRequest{Settings: set("t", "u"), Checkpoint: out.last}, out, func() bool { return out.idle })
	sameRows(t, conn, "t", out.rows[ts])
	sameRows(t, conn, "u", out.rows[us])

	// A table removed while streaming is no longer read; the others go on.
	db.Exec(t, `UPDATE t SET v = -1 WHERE id = 2`)
	db.Exec(t, `UPDATE u SET v = 8 WHERE id = 300`)
	out.idle = false
	readUntil(t, s, serve.ReadRequest{Settings: set("u"), Checkpoint: out.last}, out, func() bool { return out.idle })
	if p := position(t, out.last); fmt.Sprint(p.Tables) != "[u]" || len(p.Schemas) != 1 {
		t.Fatalf("position after t was removed: tables %v, schemas %d", p.Tables, len(p.Schemas))
	}
	sameRows(t, conn, "u", out.rows[us])
	if v := out.rows[ts][2]; v == -1 {
		t.Error("a change of t was read after t was removed from tables")
	}
}

// TestResnapshotWatermarksNotLogged: a server that does not log the watermark database (binlog_ignore_db) never
// sends the marks back; the Read stops with a configuration error naming the setting, instead of waiting forever.
func TestResnapshotWatermarksNotLogged(t *testing.T) {
	srv := mysqltest.StartServer(t, mysqltest.Options{Settings: map[string]string{"binlog_ignore_db": "marks"}})
	db := srv.NewDB(t)
	srv.Exec(t, "CREATE DATABASE marks")
	db.Exec(t, `CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL)`)
	db.Exec(t, `INSERT INTO t SELECT seq, seq FROM seq_1_to_30`)
	raw, _ := json.Marshal(map[string]any{"host": srv.Host, "port": srv.Port, "user": "root", "database": db.Name,
		"tables": []string{"t"}, "batch_size": 20, "watermark_database": "marks"})
	s := New()
	out := newFolded()
	readUntil(t, s, serve.ReadRequest{Settings: raw}, out, func() bool { return out.idle })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := s.Read(ctx, serve.ReadRequest{Settings: raw, Checkpoint: out.last, Resnapshot: []string{db.Name + ".t"}}, out)
	if err == nil || !strings.Contains(err.Error(), "never came out of the binary log") || !strings.Contains(fault.FixOf(err), "set watermark_database") {
		t.Fatalf("read with unlogged watermarks: %v (fix: %s)", err, fault.FixOf(err))
	}
}

// TestTableAddedAfterSnapshotWithoutItsClosingCheckpoint: the engine commits a checkpoint with the rows it
// covers, so a snapshot's closing checkpoint (no rows) may never become durable — a `sync --once` that copied
// everything and then saw no change ends on the last chunk's checkpoint, still in the snapshot phase. A table
// added to the settings next must be copied while streaming, as after any finished snapshot, not refused.
func TestTableAddedAfterSnapshotWithoutItsClosingCheckpoint(t *testing.T) {
	db := mysqltest.NewDB(t)
	db.Exec(t, `CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL)`)
	db.Exec(t, `INSERT INTO t SELECT seq, seq FROM seq_1_to_100`)
	db.Exec(t, `CREATE TABLE u (id int PRIMARY KEY, v int NOT NULL)`)
	db.Exec(t, `INSERT INTO u SELECT seq, -seq FROM seq_1_to_300`)
	set := func(tables ...string) json.RawMessage {
		raw, _ := json.Marshal(map[string]any{"host": db.Server.Host, "port": db.Server.Port, "user": "root", "database": db.Name,
			"tables": tables, "batch_size": 70})
		return raw
	}
	s := New()
	out := newFolded()
	readUntil(t, s, serve.ReadRequest{Settings: set("t")}, out, func() bool { return out.idle })
	var lastChunk []byte
	for _, cp := range out.all {
		if p, err := DecodePosition(cp); err == nil && p != nil && p.Phase == PhaseSnapshot {
			lastChunk = cp
		}
	}
	if p, err := DecodePosition(lastChunk); err != nil || p == nil || !p.copiedAll() {
		t.Fatalf("the last snapshot-phase checkpoint should have every table copied: %s (%v)", lastChunk, err)
	}
	db.Exec(t, `UPDATE t SET v = v + 1 WHERE id <= 10`)
	db.Exec(t, `UPDATE u SET v = 0 WHERE id <= 5`)
	readUntil(t, s, serve.ReadRequest{Settings: set("t", "u"), Checkpoint: lastChunk}, out, func() bool {
		return len(out.marks) == 2 && out.idle
	})
	conn := db.Open(t)
	sameRows(t, conn, "t", out.rows[db.Name+".t"])
	sameRows(t, conn, "u", out.rows[db.Name+".u"])
}
