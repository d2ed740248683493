package main

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugins/mysql/source"
	"github.com/skippr-dev/skippr/testkit/mysqltest"
)

// TestRowFilter copies and streams a table with a row filter (table_options where) while a write load moves
// rows into and out of it (updates of the filtered columns and of the key), deletes and inserts. The folded
// result must equal a fresh copy, whose snapshot SELECT the server filters: the source rows the filter holds
// for. The stream evaluates the filter itself on each row image (an update moving a row out is a delete, one
// moving it in an insert), so every case is also a comparison of the plugin's evaluation with the server's.
func TestRowFilter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, where string }{
		{name: "equality", where: "region = 'eu'"},
		{name: "range-or-null", where: "n BETWEEN 10 AND 60 OR region IS NULL"},
		// The column's collation (utf8mb4_general_ci on MariaDB) makes 'EU' match 'eu' on both sides.
		{name: "collation-and-arithmetic", where: "region IN ('EU', 'us') AND n % 3 <> 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := mysqltest.NewDB(t)
			db.Exec(t, `CREATE TABLE t (id int PRIMARY KEY, region varchar(8), n int);
				INSERT INTO t SELECT seq, ELT(1 + seq % 4, 'eu', 'us', 'apac', NULL), seq % 100 FROM seq_1_to_3000`)
			set := settings(db, map[string]any{"tables": []string{"t"}, "batch_size": 100,
				"table_options": map[string]any{"t": map[string]any{"where": tc.where}}})
			r := startReading(t, startPlugin(t), set, nil)
			h := db.Open(t)
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(3, 4))
				regions := []string{"'eu'", "'EU'", "'us'", "'apac'", "NULL"}
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					id := 1 + rng.IntN(3000)
					var q string
					switch rng.IntN(6) {
					case 0, 1:
						q = fmt.Sprintf("UPDATE t SET region = %s WHERE id = %d", regions[rng.IntN(len(regions))], id)
					case 2:
						q = fmt.Sprintf("UPDATE t SET n = %d WHERE id = %d", rng.IntN(100), id)
					case 3:
						q = fmt.Sprintf("UPDATE t SET id = id + 10000, region = %s WHERE id = %d", regions[rng.IntN(len(regions))], id)
					case 4:
						q = fmt.Sprintf("DELETE FROM t WHERE id = %d", id)
					default:
						q = fmt.Sprintf("INSERT IGNORE INTO t VALUES (%d, %s, %d)", 20000+i, regions[rng.IntN(len(regions))], rng.IntN(100))
					}
					if _, err := h.Exec(q); err != nil {
						t.Errorf("writer: %s: %v", q, err)
						return
					}
				}
			}()
			s := newState()
			var snapshotRows int64
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
				snapshotRows += ch.Rows
			}
			// Some more of the load while streaming.
			time.Sleep(2 * time.Second)
			close(stop)
			wg.Wait()
			catchUp(t, r, s, db)
			r.Stop()
			if snapshotRows == 0 || snapshotRows >= 2500 {
				t.Errorf("the snapshot copied %d rows, want some, and far fewer than the table's 3000", snapshotRows)
			}
			if s.ops[change.OpDelete] == 0 || s.ops[change.OpInsert] == 0 {
				t.Errorf("ops seen %v: want rows moving out (deletes) and in (inserts)", s.ops)
			}
			same(t, snapshotState(t, startPlugin(t), set), s)
		})
	}
}

// TestRowFilterRefused: a filter the server or the evaluator cannot apply stops the Read at start with a config
// fault naming table and filter; so does a filter changed on a running pipeline (fix: a re-snapshot).
func TestRowFilterRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, where, want string }{
		{name: "unknown-column", where: "nope = 1", want: "Unknown column 'nope'"},
		{name: "syntax", where: "region =", want: "SQL syntax"},
		{name: "volatile", where: "n < UNIX_TIMESTAMP()", want: "UNIX_TIMESTAMP is not allowed"},
		{name: "subquery", where: "id IN (SELECT id FROM t)", want: "a subquery is not allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := mysqltest.NewDB(t)
			db.Exec(t, `CREATE TABLE t (id int PRIMARY KEY, region varchar(8), n int)`)
			r := startReading(t, startPlugin(t), settings(db, map[string]any{"tables": []string{"t"},
				"table_options": map[string]any{"t": map[string]any{"where": tc.where}}}), nil)
			defer r.Stop()
			err := r.Err(time.Minute)
			if !errors.Is(err, fault.ErrConfig) || !strings.Contains(err.Error(), "table_options.t.where ("+tc.where+") cannot be a row filter") ||
				!strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Read: %v, want a config fault naming the filter and %q", err, tc.want)
			}
		})
	}

	t.Run("changed-while-running", func(t *testing.T) {
		t.Parallel()
		db := mysqltest.NewDB(t)
		db.Exec(t, `CREATE TABLE t (id int PRIMARY KEY, region varchar(8)); INSERT INTO t VALUES (1, 'eu')`)
		set := func(where string) []byte {
			return settings(db, map[string]any{"tables": []string{"t"}, "table_options": map[string]any{"t": map[string]any{"where": where}}})
		}
		c := startPlugin(t)
		r := startReading(t, c, set("region = 'eu'"), nil)
		ch := r.MustNext(time.Minute)
		r.Stop()
		r = startReading(t, c, set("region = 'us'"), ch.Checkpoint.Position)
		defer r.Stop()
		err := r.Err(time.Minute)
		if !errors.Is(err, fault.ErrConfig) || !strings.Contains(err.Error(), "where of table "+db.Name+".t changed") ||
			!strings.Contains(fault.FixOf(err), "skippr resnapshot PIPELINE "+db.Name+".t") {
			t.Fatalf("Read with another filter: %v (fix %q), want a config fault naming the table and the re-snapshot", err, fault.FixOf(err))
		}
	})
}
