package main

import (
	"testing"
	"time"

	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// TestSourceCommittedAt: a row streamed from Postgres carries its transaction's commit time (from the
// pgoutput Begin/Commit messages, microseconds) into _skippr_source_committed_at; a snapshot row holds NULL.
// The server runs on this machine, so the commit lies between the test's clock before and after the write.
func TestSourceCommittedAt(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE TABLE t (id int PRIMARY KEY, v int); INSERT INTO t VALUES (1, 1)`)
	src, dst := startPlugin(t), startPlugin(t)
	p := newPipe(t, src, dst,
		settings(db, map[string]any{"tables": []string{"t"}, "slot": slot(db)}),
		settings(db, map[string]any{"schema": "replica", "metadata_columns": []string{"source_committed_at"}}))
	p.start()
	p.catchUp(db, time.Minute)
	write := func(sql string) (before, after time.Time) {
		before = time.Now().Truncate(time.Microsecond)
		db.Exec(t, sql)
		return before, time.Now()
	}
	b2, a2 := write(`INSERT INTO t VALUES (2, 2)`)
	b3, a3 := write(`BEGIN; INSERT INTO t VALUES (3, 3); UPDATE t SET v = 20 WHERE id = 2; COMMIT`)
	p.catchUp(db, time.Minute)

	committed := func(id int) *time.Time {
		var at *time.Time
		db.QueryRow(t, []any{&at}, `SELECT _skippr_source_committed_at FROM replica.t WHERE id = $1`, id)
		return at
	}
	if at := committed(1); at != nil {
		t.Errorf("snapshot row 1: _skippr_source_committed_at = %v, want NULL", at)
	}
	for _, c := range []struct {
		id            int
		before, after time.Time
	}{{2, b3, a3}, {3, b3, a3}} {
		at := committed(c.id)
		if at == nil || at.Before(c.before) || at.After(c.after) {
			t.Errorf("row %d: _skippr_source_committed_at = %v, want its transaction's commit, between %v and %v", c.id, at, c.before, c.after)
		}
	}
	// Rows 2 and 3 were last written by one transaction: the same commit time, which is not row 2's first.
	if a, b := committed(2), committed(3); a == nil || b == nil || !a.Equal(*b) || a.Before(a2) {
		t.Errorf("rows 2 and 3 hold %v and %v, want the second transaction's one commit time (after %v, the first's end; it began %v)", a, b, a2, b2)
	}
}
