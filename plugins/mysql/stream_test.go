package main

import (
	"bytes"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/conformance"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugins/mysql/source"
	"github.com/skippr-dev/skippr/testkit/mysqltest"
)

// twoTables makes tables a (single key) and b (composite key) with n rows each.
func twoTables(t *testing.T, db *mysqltest.DB, n int) {
	db.Exec(t, fmt.Sprintf(`CREATE TABLE a (id int PRIMARY KEY, v varchar(40), n bigint unsigned);
		CREATE TABLE b (k1 int, k2 varchar(10), payload text, PRIMARY KEY (k1, k2));
		INSERT INTO a SELECT seq, concat('a', seq), seq * 1000 FROM seq_1_to_%d;
		INSERT INTO b SELECT seq %% 7, concat('k', seq), repeat('x', seq %% 50) FROM seq_1_to_%d`, n, n))
}

// write runs random small transactions on a and b until stop is closed.
func write(t *testing.T, h *sql.DB, rng *rand.Rand, stop <-chan struct{}) int {
	n := 0
	for {
		select {
		case <-stop:
			return n
		default:
		}
		id := rng.IntN(3000) + 1
		var q string
		switch rng.IntN(5) {
		case 0:
			q = fmt.Sprintf("INSERT INTO a VALUES (%d, 'w%d', %d) ON DUPLICATE KEY UPDATE v = 'dup%d'", id+5000, n, rng.Uint64(), n)
		case 1:
			q = fmt.Sprintf("UPDATE a SET v = 'u%d', n = n + 1 WHERE id = %d", n, id)
		case 2:
			q = fmt.Sprintf("DELETE FROM a WHERE id = %d", id)
		case 3:
			q = fmt.Sprintf("INSERT IGNORE INTO b VALUES (%d, 'w%d', 'p%d')", id%7, n, n)
		default:
			q = fmt.Sprintf("BEGIN; UPDATE b SET payload = 'up%d' WHERE k1 = %d LIMIT 3; DELETE FROM a WHERE id = %d; COMMIT", n, id%7, id+1)
		}
		if _, err := h.Exec(q); err != nil {
			t.Errorf("writer: %s: %v", q, err)
			return n
		}
		n++
	}
}

// applier folds chunks: a state, or a bag (full_row streams).
type applier interface {
	apply(t testing.TB, c conformance.Chunk)
}

// catchUp folds chunks until an idle stream checkpoint holds the server's current GTID position.
func catchUp(t *testing.T, r *conformance.Reading, s applier, db *mysqltest.DB) []byte {
	t.Helper()
	var want string
	db.QueryRow(t, []any{&want}, `SELECT @@gtid_binlog_pos`)
	deadline := time.Now().Add(3 * time.Minute)
	for {
		c, err := r.Next(time.Until(deadline))
		if err != nil {
			t.Fatalf("catch up to gtid %s: %v", want, err)
		}
		s.apply(t, c)
		p := position(t, c.Checkpoint.Position)
		// Tests share one server, so another test's commits may carry the position past want before the next
		// idle checkpoint: caught up means at or past it.
		if c.Checkpoint.Idle && p.Phase == source.PhaseStream && gtidAtLeast(p.GTID, want) {
			return c.Checkpoint.Position
		}
	}
}

// TestSnapshotThenStream copies two tables while writes continue, then streams inserts, updates (some
// changing the key), deletes, multi-row statements and a transaction larger than a batch; the folded result
// must equal a fresh copy of the tables row by row.
func TestSnapshotThenStream(t *testing.T) {
	t.Parallel()
	db := mysqltest.NewDB(t)
	twoTables(t, db, 3000)
	set := settings(db, map[string]any{"tables": []string{"a", "b"}, "batch_size": 100})
	c := startPlugin(t)
	r := startReading(t, c, set, nil)
	h := db.Open(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		write(t, h, rand.New(rand.NewPCG(1, 2)), stop)
	}()
	s := newState()
	snapCPs := 0
	for {
		ch, err := r.Next(2 * time.Minute)
		if err != nil {
			close(stop)
			t.Fatal(err)
		}
		s.apply(t, ch)
		if position(t, ch.Checkpoint.Position).Phase == source.PhaseStream {
			break
		}
		snapCPs++
	}
	close(stop)
	wg.Wait()
	if snapCPs < 60 {
		t.Errorf("%d snapshot checkpoints for 6000 rows in chunks of 100, want at least 60", snapCPs)
	}
	for _, q := range []string{
		"INSERT INTO a VALUES (90001, 'm1', 1), (90002, 'm2', 2), (90003, NULL, NULL)",
		"UPDATE a SET id = id + 100000 WHERE id BETWEEN 10 AND 20",
		"UPDATE b SET k2 = concat(k2, 'x') WHERE k1 = 3 LIMIT 10",
		"DELETE FROM a WHERE id BETWEEN 30 AND 60",
		"UPDATE a SET n = 18446744073709551615 WHERE id = 90001",
		"BEGIN; INSERT INTO a SELECT 200000 + seq, 'big', seq FROM seq_1_to_350; UPDATE a SET v = 'big2' WHERE id > 200100; COMMIT",
	} {
		db.Exec(t, q)
	}
	catchUp(t, r, s, db)
	if s.ops[change.OpDelete] == 0 || s.ops[change.OpUpdate] == 0 || s.ops[change.OpInsert] == 0 {
		t.Errorf("ops seen %v: want inserts, updates and deletes", s.ops)
	}
	if v := s.rows[db.Name+".a"]["90001"]; !strings.Contains(v, "n=18446744073709551615") {
		t.Errorf("BIGINT UNSIGNED max arrived as %q", v)
	}
	same(t, snapshotState(t, startPlugin(t), set), s)
}

// TestSnapshotResume copies five tables four at a time (snapshot_parallel: 4, so a table enters the window
// when one is done) and stops that Read in the middle of its snapshot (the engine keeps only what was before
// the last checkpoint with rows). A new plugin process replaying from that checkpoint, nothing changed,
// reaches the same batches and the same checkpoints byte for byte, in the same order (the overlap coordinate
// aside: other tests write to the shared server). Then rows change on both sides of the copied range, and a
// resumed Read from the same checkpoint ends equal to a fresh copy.
func TestSnapshotResume(t *testing.T) {
	t.Parallel()
	db := mysqltest.NewDB(t)
	twoTables(t, db, 1000)
	db.Exec(t, `CREATE TABLE c LIKE a; INSERT INTO c SELECT * FROM a WHERE id <= 250;
		CREATE TABLE d LIKE a; INSERT INTO d SELECT * FROM a WHERE id <= 50;
		CREATE TABLE e LIKE b; INSERT INTO e SELECT * FROM b LIMIT 420`)
	set := settings(db, map[string]any{"tables": []string{"a", "b", "c", "d", "e"}, "batch_size": 100, "snapshot_parallel": 4})
	first := readSnapshot(t, set, nil)
	// The checkpoint to resume from: two chunks after the first table finished (d, in round 1), so e is in
	// the window and a, b, c are part copied.
	kill := -1
	for i, ch := range first {
		if p := position(t, ch.Checkpoint.Position); p.Progress["d"].Done && kill < 0 {
			kill = i + 2
		}
	}
	if kill < 0 || kill >= len(first)-1 {
		t.Fatalf("no checkpoint after table d was copied among %d", len(first))
	}
	last := first[kill].Checkpoint.Position
	p := position(t, last)
	if p.Phase != source.PhaseSnapshot || p.Progress["a"].Key == nil || p.Progress["a"].Done || !p.Progress["d"].Done {
		t.Fatalf("resuming from %s, want a snapshot in progress with d done and a not", last)
	}
	replay := readSnapshot(t, set, last)
	if len(replay) != len(first)-kill-1 {
		t.Fatalf("the replay from checkpoint %d reached %d checkpoints, the first copy %d after it", kill, len(replay), len(first)-kill-1)
	}
	for i, ch := range replay {
		want := first[kill+1+i]
		if got, w := withoutOverlap(t, ch.Checkpoint.Position), withoutOverlap(t, want.Checkpoint.Position); got != w || !sameBatches(ch, want) {
			t.Fatalf("replayed checkpoint %d: %s with %d rows, the first copy's: %s with %d rows", i, got, ch.Rows, w, want.Rows)
		}
	}

	s := newState()
	for _, ch := range first[:kill+1] {
		s.apply(t, ch)
	}
	db.Exec(t, `UPDATE a SET v = 'changed' WHERE id IN (5, 450, 999); DELETE FROM a WHERE id IN (6, 451);
		INSERT INTO a VALUES (7000, 'new', 1); UPDATE b SET payload = 'changed' WHERE k1 = 1;
		UPDATE c SET v = 'changed' WHERE id IN (1, 249); UPDATE d SET v = 'changed' WHERE id = 3; DELETE FROM e LIMIT 5`)
	r2 := startReading(t, startPlugin(t), set, last)
	catchUp(t, r2, s, db)
	same(t, snapshotState(t, startPlugin(t), set), s)
}

// readSnapshot reads from checkpoint from (nil: a new snapshot) in a new plugin process up to the end of
// the snapshot, and returns every chunk up to and including the snapshot's last checkpoint with rows.
func readSnapshot(t *testing.T, set, from []byte) []conformance.Chunk {
	t.Helper()
	r := startReading(t, startPlugin(t), set, from)
	defer r.Stop()
	var out []conformance.Chunk
	for {
		ch, err := r.Next(2 * time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if position(t, ch.Checkpoint.Position).Phase == source.PhaseStream {
			return out
		}
		out = append(out, ch)
	}
}

// withoutOverlap is a checkpoint as text without its overlap coordinate.
func withoutOverlap(t *testing.T, b []byte) string {
	p := position(t, b)
	p.OverlapFile, p.OverlapPos = "", 0
	return string(p.Encode())
}

// sameBatches reports whether two chunks hold the same batches, byte for byte.
func sameBatches(a, b conformance.Chunk) bool {
	var x, y [][]byte
	for _, it := range a.Items {
		if it.Batch != nil {
			x = append(x, it.Batch.IPC)
		}
	}
	for _, it := range b.Items {
		if it.Batch != nil {
			y = append(y, it.Batch.IPC)
		}
	}
	return slices.EqualFunc(x, y, bytes.Equal)
}

// TestPurgedBinlog: a pipeline that resumes after the server purged its binlog file stops with a
// re-snapshot error that says so, instead of skipping the purged changes.
func TestPurgedBinlog(t *testing.T) {
	t.Parallel()
	srv := mysqltest.StartServer(t, mysqltest.Options{})
	db := srv.NewDB(t)
	db.Exec(t, `CREATE TABLE a (id int PRIMARY KEY, v text); INSERT INTO a VALUES (1, 'x')`)
	set := settings(db, map[string]any{"tables": []string{"a"}})
	c := startPlugin(t)
	r := startReading(t, c, set, nil)
	cp := catchUp(t, r, newState(), db)
	r.Stop()
	db.Exec(t, `INSERT INTO a VALUES (2, 'lost'); FLUSH BINARY LOGS; INSERT INTO a VALUES (3, 'y')`)
	var file string
	var pos any
	var doDB, ignoreDB any
	db.QueryRow(t, []any{&file, &pos, &doDB, &ignoreDB}, `SHOW MASTER STATUS`)
	// PURGE skips a file still in use: by the stopped Read's dump thread for a moment, and by InnoDB until
	// its next binlog checkpoint (about a second here).
	old := position(t, cp).File
	h := db.Open(t)
	for deadline := time.Now().Add(time.Minute); ; {
		db.Exec(t, "PURGE BINARY LOGS TO '"+file+"'")
		var first string
		var size any
		if err := h.QueryRow("SHOW BINARY LOGS").Scan(&first, &size); err != nil {
			t.Fatal(err)
		}
		if first != old {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not purged within a minute", old)
		}
		time.Sleep(200 * time.Millisecond)
	}
	err := startReading(t, c, set, cp).Err(time.Minute)
	if !errors.Is(err, fault.ErrResnapshot) {
		t.Fatalf("resume after purge: %v, want a re-snapshot error", err)
	}
	if !strings.Contains(err.Error(), "purged") {
		t.Errorf("error %q does not say the binlog was purged", err)
	}
	if fix := fault.FixOf(err); !strings.Contains(fix, "empty checkpoint") {
		t.Errorf("fix %q does not say to start from an empty checkpoint", fix)
	}
}

// TestDDLFollowed runs each kind of DDL on captured tables while streaming, with writes around it, and after
// each compares the folded stream with a fresh copy of the tables row by row: ADD COLUMN (with a default,
// NOT NULL without one, FIRST/AFTER), MODIFY (widening), DROP COLUMN, RENAME/CHANGE COLUMN, TRUNCATE, DROP
// and CREATE TABLE, CREATE OR REPLACE, RENAME TABLE away and back, and DDL on a table not captured.
func TestDDLFollowed(t *testing.T) {
	t.Parallel()
	db := mysqltest.NewDB(t)
	db.Exec(t, `CREATE TABLE a (id int PRIMARY KEY, v varchar(20), n int);
		CREATE TABLE c (id int PRIMARY KEY, w text);
		CREATE TABLE other (id int PRIMARY KEY);
		INSERT INTO a SELECT seq, concat('v', seq), seq FROM seq_1_to_50;
		INSERT INTO c SELECT seq, concat('w', seq) FROM seq_1_to_5`)
	set := settings(db, map[string]any{"tables": []string{"a", "c"}})
	c := startPlugin(t)
	r := startReading(t, c, set, nil)
	s := newState()
	catchUp(t, r, s, db)
	schemas := 0
	for _, step := range []struct{ name, sql string }{
		{"add column with a default", `ALTER TABLE a ADD COLUMN d int NOT NULL DEFAULT 7 AFTER id; INSERT INTO a (id, d, v, n) VALUES (100, 8, 'x', 1); UPDATE a SET n = n + 1 WHERE id <= 5`},
		{"add column not null without a default", `ALTER TABLE a ADD COLUMN s varchar(10) NOT NULL FIRST; UPDATE a SET s = 'set' WHERE id = 3`},
		{"modify widens", `ALTER TABLE a MODIFY n bigint; UPDATE a SET n = 5000000000 WHERE id = 7`},
		{"drop column", `ALTER TABLE a DROP COLUMN v; INSERT INTO a (id, d, n, s) VALUES (101, 1, 2, 'q'); DELETE FROM a WHERE id = 9`},
		// A renamed column keeps the values of the rows the source leaves alone (change.RenamedFromMeta): the
		// updates touch a few rows only, so the comparison covers the others.
		{"rename column", `ALTER TABLE a RENAME COLUMN n TO m; UPDATE a SET m = coalesce(m, 0) + 1 WHERE id <= 3`},
		{"change column", `ALTER TABLE a CHANGE s s2 varchar(30) NOT NULL; UPDATE a SET s2 = concat(s2, '!') WHERE id = 3`},
		{"rename, and the old name added in the same statement", `ALTER TABLE a RENAME COLUMN m TO m3, ADD COLUMN m int DEFAULT 1; UPDATE a SET m3 = m3 + 1 WHERE id = 4`},
		{"truncate", `TRUNCATE TABLE c; INSERT INTO c VALUES (10, 'after')`},
		{"drop and create", `DROP TABLE c; CREATE TABLE c (id bigint PRIMARY KEY, w text, z int DEFAULT 3); INSERT INTO c (id, w) VALUES (1, 'new')`},
		{"create or replace", `INSERT INTO c VALUES (2, 'gone soon', 4); CREATE OR REPLACE TABLE c (id int PRIMARY KEY, k varchar(5)); INSERT INTO c VALUES (2, 'r')`},
		{"rename away and back", `RENAME TABLE c TO c_tmp, c_tmp TO c; INSERT INTO c VALUES (3, 's')`},
		{"other table", `ALTER TABLE other ADD COLUMN q int; INSERT INTO other VALUES (1, 1); INSERT INTO c VALUES (4, 't')`},
	} {
		db.Exec(t, step.sql)
		before := schemaChanges(s)
		catchUp(t, r, s, db)
		schemas += schemaChanges(s) - before
		same(t, snapshotState(t, c, set), s)
		if t.Failed() {
			t.Fatalf("after %s: %s", step.name, step.sql)
		}
	}
	if schemas == 0 {
		t.Errorf("no schema change reached the stream")
	}
}

// TestDDLRestart: a Read restarted from a checkpoint taken before two schema changes decodes the rows between
// them with the schema current at each point (kept in the checkpoint), not with the server's newest one.
func TestDDLRestart(t *testing.T) {
	t.Parallel()
	db := mysqltest.NewDB(t)
	db.Exec(t, `CREATE TABLE a (id int PRIMARY KEY, v varchar(20)); INSERT INTO a SELECT seq, concat('v', seq) FROM seq_1_to_10`)
	set := settings(db, map[string]any{"tables": []string{"a"}})
	c := startPlugin(t)
	r := startReading(t, c, set, nil)
	s := newState()
	cp := catchUp(t, r, s, db)
	r.Stop()
	db.Exec(t, `INSERT INTO a VALUES (11, 'before');
		ALTER TABLE a ADD COLUMN w int DEFAULT 3;
		INSERT INTO a VALUES (12, 'between', 4);
		ALTER TABLE a DROP COLUMN v, ADD COLUMN x varchar(5) FIRST;
		INSERT INTO a VALUES ('after', 13, 5)`)
	r2 := startReading(t, startPlugin(t), set, cp)
	catchUp(t, r2, s, db)
	same(t, snapshotState(t, c, set), s)
}

// TestDDLRefused: a DDL the plugin cannot follow (an uncaptured table's rows renamed into a captured name)
// stops the stream with a data error naming the statement, rather than reading later rows into wrong columns.
func TestDDLRefused(t *testing.T) {
	t.Parallel()
	db := mysqltest.NewDB(t)
	db.Exec(t, `CREATE TABLE a (id int PRIMARY KEY, v text); CREATE TABLE a_new (id int PRIMARY KEY, v text, w int); INSERT INTO a VALUES (1, 'x')`)
	r := startReading(t, startPlugin(t), settings(db, map[string]any{"tables": []string{"a"}}), nil)
	catchUp(t, r, newState(), db)
	db.Exec(t, `RENAME TABLE a TO a_old, a_new TO a; INSERT INTO a VALUES (2, 'y', 3)`)
	err := r.Err(time.Minute)
	if !errors.Is(err, fault.ErrData) || !strings.Contains(err.Error(), "RENAME TABLE a TO a_old, a_new TO a") || !strings.Contains(fault.FixOf(err), "empty checkpoint") {
		t.Fatalf("after renaming another table into a captured one: %v, want a data error naming the statement and the fix", err)
	}
}

func schemaChanges(s *state) int { return s.schemas }

// gtidAtLeast compares MariaDB GTID positions ("domain-server-seq", comma-separated per domain): every domain of
// want must be reached by got.
func gtidAtLeast(got, want string) bool {
	seqs := map[string]uint64{}
	for _, g := range strings.Split(got, ",") {
		if parts := strings.Split(strings.TrimSpace(g), "-"); len(parts) == 3 {
			n, _ := strconv.ParseUint(parts[2], 10, 64)
			seqs[parts[0]] = n
		}
	}
	for _, w := range strings.Split(want, ",") {
		parts := strings.Split(strings.TrimSpace(w), "-")
		if len(parts) != 3 {
			return got == want
		}
		n, _ := strconv.ParseUint(parts[2], 10, 64)
		if seqs[parts[0]] < n {
			return false
		}
	}
	return true
}

// TestTruncateModes: TRUNCATE of a captured table is a truncate change in order with the rows around it
// (truncate: propagate, the default), stops the Read with a data error naming the settings (error), or is
// skipped so the destination keeps its rows (ignore).
func TestTruncateModes(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"default", "propagate", "error", "ignore"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			db := mysqltest.NewDB(t)
			db.Exec(t, `CREATE TABLE a (id int PRIMARY KEY, v text); INSERT INTO a VALUES (1, 'x'), (2, 'y')`)
			extra := map[string]any{"tables": []string{"a"}}
			if mode != "default" {
				extra["truncate"] = mode
			}
			set := settings(db, extra)
			r := startReading(t, startPlugin(t), set, nil)
			s := newState()
			catchUp(t, r, s, db)
			db.Exec(t, `INSERT INTO a VALUES (3, 'before'); TRUNCATE TABLE a; INSERT INTO a VALUES (4, 'after')`)
			if mode == "error" {
				err := r.Err(time.Minute)
				if !errors.Is(err, fault.ErrData) || !strings.Contains(err.Error(), "TRUNCATE TABLE a") || !strings.Contains(fault.FixOf(err), "truncate: propagate") {
					t.Fatalf("truncate: error gave %v (fix %q), want a data error naming the statement and the settings", err, fault.FixOf(err))
				}
				return
			}
			catchUp(t, r, s, db)
			stream := db.Name + ".a"
			keys := slices.Sorted(maps.Keys(s.rows[stream]))
			want := []string{"4"}
			if mode == "ignore" {
				want = []string{"1", "2", "3", "4"}
			}
			if !slices.Equal(keys, want) {
				t.Fatalf("keys after TRUNCATE with truncate: %s: %v, want %v", mode, keys, want)
			}
		})
	}
}

// TestDDLAfterFinishedSnapshot: a Read restarted from the snapshot's last checkpoint with rows (every table
// copied, streaming not yet begun) after a schema change streams from the snapshot's coordinate with the
// columns the copy had, replaying the change in its place (the quickstart met this: `sync --once` may end
// there).
func TestDDLAfterFinishedSnapshot(t *testing.T) {
	t.Parallel()
	db := mysqltest.NewDB(t)
	// 300 rows in chunks of 100: the last chunk is full, and its checkpoint must already say the copy is done.
	db.Exec(t, `CREATE TABLE a (id int PRIMARY KEY, v varchar(20)); INSERT INTO a SELECT seq, concat('v', seq) FROM seq_1_to_300`)
	set := settings(db, map[string]any{"tables": []string{"a"}, "batch_size": 100})
	c := startPlugin(t)
	r := startReading(t, c, set, nil)
	s := newState()
	var last []byte
	for {
		ch := r.MustNext(time.Minute)
		p := position(t, ch.Checkpoint.Position)
		if p.Phase == source.PhaseStream {
			break
		}
		s.apply(t, ch)
		// Like the engine, which makes durable only checkpoints that carry rows.
		if ch.Rows > 0 {
			last = ch.Checkpoint.Position
		}
	}
	r.Stop()
	if p := position(t, last); !p.Progress["a"].Done {
		t.Fatalf("the last snapshot checkpoint has the copy unfinished: %s", last)
	}
	db.Exec(t, `INSERT INTO a VALUES (400, 'before'); ALTER TABLE a ADD COLUMN w int NOT NULL DEFAULT 9; INSERT INTO a VALUES (401, 'after', 1)`)
	r2 := startReading(t, startPlugin(t), set, last)
	catchUp(t, r2, s, db)
	same(t, snapshotState(t, c, set), s)
}
