package main

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skippr-dev/skippr/plugins/postgres/source"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// The snapshot reads each table with one key-ordered query, read to its end while chunks go out (it used to
// be one LIMIT query per chunk, which cost the server a new index descent and the pipeline a round trip
// per chunk). That query must survive an engine that stalls for longer than the database's
// statement_timeout, and must walk the key index rather than sort the table, even for a table whose
// physical order has nothing to do with its key.
func TestSnapshotQueryOutlivesStatementTimeoutAndDoesNotSort(t *testing.T) {
	// Not parallel: scan counts are read after the plugin's connections end, and no other test's scans of
	// this database should be waiting to be flushed then.
	db := pgtest.NewDB(t)
	const rows = 100000
	// About 100 MiB of uncompressed rows in random key order: more than the plugin, gRPC, the sockets and this
	// test's reader buffer together, so the query cannot finish while the reader below pauses.
	db.Exec(t, `CREATE TABLE big (id int PRIMARY KEY, pad text NOT NULL);
		INSERT INTO big SELECT g, repeat(md5(g::text), 30) FROM generate_series(1, 100000) g ORDER BY random();
		ANALYZE big`)
	db.Exec(t, `ALTER DATABASE `+pgx.Identifier{db.Name}.Sanitize()+` SET statement_timeout = '500ms'`)
	scans := func() (seq, idx int64) {
		db.QueryRow(t, []any{&seq, &idx}, `SELECT coalesce(seq_scan, 0), coalesce(idx_scan, 0) FROM pg_stat_user_tables WHERE relid = 'big'::regclass`)
		return seq, idx
	}
	seq0, idx0 := scans()

	r := startReading(t, startPlugin(t), settings(db, map[string]any{"tables": []string{"big"}, "slot": slot(db), "batch_size": 1000}), nil)
	got := r.mustNext(time.Minute).rows
	time.Sleep(1500 * time.Millisecond) // three statement timeouts
	for {
		c, err := r.next(time.Minute)
		if err != nil {
			t.Fatalf("after %d rows: %v", got, err)
		}
		got += c.rows
		if position(t, c.cp.Position).Phase != source.PhaseSnapshot {
			break
		}
	}
	if got != rows {
		t.Fatalf("snapshot sent %d rows, want %d", got, rows)
	}
	r.stop() // the plugin's connections close, and their backends flush their statistics as they exit

	deadline := time.Now().Add(30 * time.Second)
	for {
		seq, idx := scans()
		if seq != seq0 {
			t.Fatalf("the snapshot scanned the table sequentially (seq_scan %d → %d): it sorted instead of walking the key index", seq0, seq)
		}
		if idx > idx0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no scan of the table recorded after the snapshot (seq_scan %d, idx_scan %d)", seq, idx)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
