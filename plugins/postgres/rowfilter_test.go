package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugins/postgres/source"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// TestRowFilter copies and streams a table with a row filter (table_options where) into the Postgres
// destination while a write load moves rows into and out of the filter, deletes and inserts: the destination
// must end up holding exactly the source rows the filter holds for. An update that moves a row out comes from
// pgoutput as a DELETE, one that moves it in as an INSERT; without the filter in the snapshot's SELECT and the
// publication, the destination would hold every row.
func TestRowFilter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, ddl, where string
		// move is one statement of the load, given a random id; moves rows in and out of the filter.
		move []string
	}{
		{
			name:  "replica-identity-full",
			ddl:   `CREATE TABLE t (id int PRIMARY KEY, region text, n int); ALTER TABLE t REPLICA IDENTITY FULL`,
			where: "region = 'eu'",
			move: []string{
				`UPDATE t SET region = 'us', n = n + 1 WHERE id = %d`, // out (or out to out)
				`UPDATE t SET region = 'eu', n = n + 1 WHERE id = %d`, // in (or in to in)
				`UPDATE t SET region = NULL WHERE id = %d`,            // NULL: out
				`UPDATE t SET n = n + 1 WHERE id = %d`,                // stays where it is
				`DELETE FROM t WHERE id = %d`,
				`INSERT INTO t VALUES (%d + 100000, 'eu', 0) ON CONFLICT DO NOTHING`,
				`INSERT INTO t VALUES (%d + 200000, 'us', 0) ON CONFLICT DO NOTHING`,
			},
		},
		{
			// The filter names only the key, the default replica identity: a row moves by a key change.
			name:  "key-column",
			ddl:   `CREATE TABLE t (id int PRIMARY KEY, region text, n int)`,
			where: "id % 2 = 0",
			move: []string{
				`UPDATE t SET id = id + 500001 WHERE id = %d`, // odd to even and back: out or in
				`UPDATE t SET n = n + 1 WHERE id = %d`,
				`DELETE FROM t WHERE id = %d`,
				`INSERT INTO t VALUES (%d + 100000, 'eu', 0) ON CONFLICT DO NOTHING`,
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := pgtest.NewDB(t)
			db.Exec(t, tc.ddl+`; INSERT INTO t SELECT g, CASE g % 3 WHEN 0 THEN 'eu' WHEN 1 THEN 'us' END, 0 FROM generate_series(1, 6000) g;
				ANALYZE t; CREATE VIEW expected AS SELECT * FROM t WHERE `+tc.where)
			src, dst := startPlugin(t), startPlugin(t)
			srcSet := settings(db, map[string]any{"tables": []string{"t"}, "slot": slot(db), "batch_size": 500,
				"table_options": map[string]any{"public.t": map[string]any{"where": tc.where}}})
			p := newPipe(t, src, dst, srcSet, settings(db, map[string]any{"schema": "replica"}))
			p.start()
			defer p.r.stop()

			// The load runs while the snapshot is read and while the stream is followed, one transaction of a
			// few statements after another.
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			conn := db.Connect(t)
			stop, done := make(chan struct{}), make(chan error, 1)
			go func() {
				rng := rand.New(rand.NewPCG(1, 2))
				for {
					select {
					case <-stop:
						done <- nil
						return
					default:
					}
					var b strings.Builder
					b.WriteString("BEGIN;")
					for range 4 {
						fmt.Fprintf(&b, tc.move[rng.IntN(len(tc.move))]+";", 1+rng.IntN(6000))
					}
					b.WriteString("COMMIT")
					if _, err := conn.Exec(ctx, b.String()); err != nil {
						done <- err
						return
					}
				}
			}()
			snapshotRows, streamed := int64(0), 0
			for streamed < 20 {
				c, err := p.step(time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				if position(t, c.cp.Position).Phase == source.PhaseSnapshot {
					snapshotRows += c.rows
				} else {
					streamed++
				}
			}
			close(stop)
			if err := <-done; err != nil {
				t.Fatalf("load: %v", err)
			}
			if snapshotRows == 0 || snapshotRows > 4000 {
				t.Errorf("the snapshot copied %d rows, want some, and far fewer than the table's 6000", snapshotRows)
			}
			p.catchUp(db, 2*time.Minute)
			sameRows(t, db, "public.expected", "replica.t")
		})
	}
}

// TestRowFilterRefused: a filter the server cannot apply, or one the publication does not have, stops the Read
// at start with a config fault that names table and filter and gives the server's reason or the fix; so does a
// filter changed on a running pipeline (its fix: a re-snapshot of the table).
func TestRowFilterRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, ddl, where string
		want             []string
	}{
		{name: "volatile", ddl: `ALTER TABLE t REPLICA IDENTITY FULL`, where: "random() > 0.5",
			want: []string{"table_options.public.t.where (random() > 0.5) cannot be a row filter", "mutable functions are not allowed"}},
		{name: "no-such-column", ddl: `ALTER TABLE t REPLICA IDENTITY FULL`, where: "nope = 1",
			want: []string{"table_options.public.t.where (nope = 1) cannot be a row filter", `column "nope" does not exist`}},
		{name: "not-replica-identity", where: "region = 'eu'",
			want: []string{"table_options.public.t.where (region = 'eu') cannot be a row filter", "not part of the replica identity"}},
		{name: "publication-differs", ddl: `ALTER TABLE t REPLICA IDENTITY FULL; CREATE PUBLICATION skippr FOR TABLE t WHERE (region = 'us')`, where: "region = 'eu'",
			want: []string{`publication "skippr" filters the rows of public.t by (region = 'us'::text)`, `ALTER PUBLICATION "skippr" ADD TABLE "public"."t" WHERE (region = 'eu')`}},
		{name: "publication-filters-setting-not", ddl: `ALTER TABLE t REPLICA IDENTITY FULL; CREATE PUBLICATION skippr FOR TABLE t WHERE (region = 'us')`,
			want: []string{`publication "skippr" filters the rows of public.t (WHERE (region = 'us'::text)), but table_options.public.t sets no where`}},
		{name: "publication-unfiltered", ddl: `ALTER TABLE t REPLICA IDENTITY FULL; CREATE PUBLICATION skippr FOR TABLE t`, where: "region = 'eu'",
			want: []string{`publication "skippr" publishes every row of public.t, but table_options.public.t.where filters them`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := pgtest.NewDB(t)
			db.Exec(t, `CREATE TABLE t (id int PRIMARY KEY, region text); `+tc.ddl)
			opts := map[string]any{}
			if tc.where != "" {
				opts["public.t"] = map[string]any{"where": tc.where}
			}
			r := startReading(t, startPlugin(t), settings(db, map[string]any{"tables": []string{"t"}, "slot": slot(db), "table_options": opts}), nil)
			defer r.stop()
			err := r.readErr(time.Minute)
			if !errors.Is(err, fault.ErrConfig) {
				t.Fatalf("Read: %v, want a config fault", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}

	t.Run("changed-while-running", func(t *testing.T) {
		t.Parallel()
		db := pgtest.NewDB(t)
		db.Exec(t, `CREATE TABLE t (id int PRIMARY KEY, region text); ALTER TABLE t REPLICA IDENTITY FULL;
			INSERT INTO t SELECT g, 'eu' FROM generate_series(1, 10) g`)
		set := func(where string) []byte {
			return settings(db, map[string]any{"tables": []string{"t"}, "slot": slot(db),
				"table_options": map[string]any{"public.t": map[string]any{"where": where}}})
		}
		src := startPlugin(t)
		r := startReading(t, src, set("region = 'eu'"), nil)
		c := r.mustNext(time.Minute)
		r.stop()
		r = startReading(t, src, set("region = 'us'"), c.cp.Position)
		defer r.stop()
		err := r.readErr(time.Minute)
		if !errors.Is(err, fault.ErrConfig) || !strings.Contains(err.Error(), "where of table public.t changed") ||
			!strings.Contains(fault.FixOf(err), "skippr resnapshot PIPELINE public.t") {
			t.Fatalf("Read with another filter: %v, want a config fault naming the table and the re-snapshot", err)
		}
	})
}
