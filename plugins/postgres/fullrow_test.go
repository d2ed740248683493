package main

import (
	"testing"
	"time"

	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// TestFullRowPipeline: a keyless table under REPLICA IDENTITY FULL in mode: full_row, holding identical rows
// and NULLs, is copied, then followed through updates and deletes of one of several identical rows, of all of
// them, of rows with NULLs and json values (a type without equality), a TOASTed value left unchanged, and a
// truncate: the destination holds the same multiset of rows as the source after each step.
func TestFullRowPipeline(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	// d is json, which has no equality operator: rows are still matched.
	db.Exec(t, `CREATE TABLE bag (a int, b text, c jsonb, d json); ALTER TABLE bag REPLICA IDENTITY FULL;
		INSERT INTO bag VALUES (1, 'x', '{"k": 1}', '{"k":  1}'), (1, 'x', '{"k": 1}', '{"k":  1}'), (1, 'x', '{"k": 1}', '{"k":  1}'),
			(2, NULL, NULL, NULL), (2, NULL, NULL, NULL), (NULL, NULL, NULL, NULL), (3, '', 'null', '[]')`)
	src, dst := startPlugin(t), startPlugin(t)
	p := newPipe(t, src, dst,
		settings(db, map[string]any{"tables": []string{"bag"}, "slot": slot(db), "table_options": map[string]any{"bag": map[string]any{"mode": "full_row"}}}),
		settings(db, map[string]any{"schema": "replica"}))
	p.start()
	p.catchUp(db, time.Minute)
	sameRows(t, db, "public.bag", "replica.bag")
	var dType string
	db.QueryRow(t, []any{&dType}, `SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 'replica.bag'::regclass AND attname = 'd'`)
	if dType != "json" {
		t.Fatalf("replica.bag.d is %s, want json (a type without equality)", dType)
	}
	one := func(where string) string { return `(SELECT ctid FROM bag WHERE ` + where + ` LIMIT 1)` }
	for _, step := range []string{
		`UPDATE bag SET b = 'y' WHERE ctid = ` + one(`a = 1`),
		`DELETE FROM bag WHERE ctid = ` + one(`a = 1 AND b = 'x'`),
		`DELETE FROM bag WHERE ctid = ` + one(`a = 2`) + `; UPDATE bag SET a = 5 WHERE a IS NULL`,
		`INSERT INTO bag SELECT 7, repeat('long', 5000), '[1]' FROM generate_series(1, 3); UPDATE bag SET c = '[2]' WHERE ctid = ` + one(`a = 7`),
		`BEGIN; INSERT INTO bag VALUES (8, 'z', NULL), (8, 'z', NULL); DELETE FROM bag WHERE a = 8; UPDATE bag SET a = 9 WHERE b = ''; COMMIT`,
		`UPDATE bag SET b = b || '!' WHERE a = 1`,
		`TRUNCATE bag; INSERT INTO bag VALUES (4, 'w', NULL), (4, 'w', NULL)`,
		`DELETE FROM bag WHERE ctid = ` + one(`a = 4`),
	} {
		db.Exec(t, step)
		p.catchUp(db, time.Minute)
		sameRows(t, db, "public.bag", "replica.bag")
		if t.Failed() {
			t.Fatalf("after %s", step)
		}
	}
}
