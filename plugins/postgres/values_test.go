package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/conformance"
	"github.com/skippr-dev/skippr/plugin-sdk/conformance/filedest"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/values"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// oddTable holds legal PostgreSQL values that Arrow cannot (and values at the edge that it can: ±infinity,
// the first and last dates, the microsecond before the one that carries infinity).
const oddTable = `CREATE TABLE odd (id int PRIMARY KEY, n numeric(10,2), ts timestamp, tstz timestamptz, d date, arr timestamp[], ia int[])`

// oddRows are inserted with ids base+1..base+6; oddChanges is what null_and_record must record for each
// (column=value), oddKept the data the destination must hold (the unrepresentable values as NULL).
var (
	oddRows = []string{
		`'NaN', '2024-01-01 00:00:00', NULL, NULL, NULL, '{{1,2},{3,4}}'`,
		`NULL, NULL, 'infinity', NULL, NULL, '[0:2]={7,8,9}'`, // numeric(p,s) refuses ±Infinity itself: only NaN gets in
		`'NaN', '-infinity', '-infinity', 'infinity', '{infinity,-infinity}', NULL`,
		`NULL, '294247-01-10 04:00:54.775806', '294247-01-10 04:00:54.775807+00', '-infinity', NULL, NULL`,
		`NULL, '294276-12-31 23:59:59', '294247-01-10 04:00:54.775808+00', NULL, '{"2024-01-01 00:00:00",infinity,"294247-01-10 04:00:54.775807"}', NULL`,
		`12.50, '4713-01-01 00:00:00 BC', '2000-01-01 00:00:00+00', '5874897-12-31', '{}', '{1,NULL}'`,
	}
	oddChanges = [][]string{
		{"n=NaN", "ia={{1,2},{3,4}}"},
		{"ia=[0:2]={7,8,9}"},
		{"n=NaN"},
		{"tstz=294247-01-10 04:00:54.775807+00"}, // int64's last microsecond carries infinity
		{"ts=294276-12-31 23:59:59", "tstz=294247-01-10 04:00:54.775808+00", `arr={"2024-01-01 00:00:00",infinity,"294247-01-10 04:00:54.775807"}`},
		nil,
	}
	oddKept = []string{
		`NULL, '2024-01-01 00:00:00', NULL, NULL, NULL, NULL`,
		`NULL, NULL, 'infinity', NULL, NULL, '{7,8,9}'`,
		`NULL, '-infinity', '-infinity', 'infinity', '{infinity,-infinity}', NULL`,
		`NULL, '294247-01-10 04:00:54.775806', NULL, '-infinity', NULL, NULL`,
		`NULL, NULL, NULL, NULL, '{"2024-01-01 00:00:00",infinity,NULL}', NULL`,
		`12.50, '4713-01-01 00:00:00 BC', '2000-01-01 00:00:00+00', '5874897-12-31', '{}', '{1,NULL}'`,
	}
)

func insertOdd(t *testing.T, db *pgtest.DB, table string, rows []string, base int) {
	t.Helper()
	var stmts []string
	for i, r := range rows {
		stmts = append(stmts, fmt.Sprintf("INSERT INTO %s VALUES (%d, %s)", table, base+i+1, r))
	}
	db.Exec(t, strings.Join(stmts, ";\n"))
}

// TestNullAndRecord: under on_unrepresentable: null_and_record, every value Arrow cannot hold arrives as NULL
// with the value recorded in _skippr_meta, in the snapshot and in the stream alike, and every value it can
// hold (±infinity and the microsecond before infinity's included) arrives exactly — in a PostgreSQL
// destination.
func TestNullAndRecord(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	db.Exec(t, oddTable+`; CREATE TABLE kept (LIKE odd)`)
	insertOdd(t, db, "odd", oddRows, 0)
	insertOdd(t, db, "kept", oddKept, 0)

	src, dst := startPlugin(t), startPlugin(t)
	srcSet := settings(db, map[string]any{"tables": []string{"odd"}, "slot": slot(db), "on_unrepresentable": "null_and_record"})
	p := newPipe(t, src, dst, srcSet, settings(db, map[string]any{"schema": "replica"}))
	p.start()
	defer p.r.stop()
	p.catchUp(db, 2*time.Minute)

	insertOdd(t, db, "odd", oddRows, 100) // the same values through the stream
	insertOdd(t, db, "kept", oddKept, 100)
	p.catchUp(db, 2*time.Minute)
	if p.schemas != 1 {
		t.Errorf("%d schema announcements: _skippr_meta must be in the schema from the start, whatever the data", p.schemas)
	}

	db.Exec(t, `CREATE VIEW replica.odd_data AS SELECT id, n, ts, tstz, d, arr, ia FROM replica.odd`)
	sameRows(t, db, "public.kept", "replica.odd_data")

	conn := db.Connect(t)
	rows, err := conn.Query(context.Background(), `SELECT id, _skippr_meta FROM replica.odd ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	type metaRow struct {
		ID   int
		Meta *string
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[metaRow])
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2*len(oddRows) {
		t.Fatalf("%d rows in the destination, want %d", len(got), 2*len(oddRows))
	}
	for _, r := range got {
		want := oddChanges[(r.ID%100)-1]
		var have []string
		if r.Meta != nil {
			var m values.Meta
			if err := json.Unmarshal([]byte(*r.Meta), &m); err != nil {
				t.Fatalf("id %d: _skippr_meta %q: %v", r.ID, *r.Meta, err)
			}
			for _, c := range m.Changes {
				if c.Reason == "" {
					t.Errorf("id %d: change %+v has no reason", r.ID, c)
				}
				have = append(have, c.Column+"="+c.Value)
			}
		}
		if !slices.Equal(have, want) {
			t.Errorf("id %d: recorded %q, want %q", r.ID, have, want)
		}
	}
}

// TestFailNamesTheValue: under the default policy an unrepresentable value stops the read with a Data error
// that names the table, column, key and value and the setting that gets past it — in the snapshot, and in the
// stream after a clean snapshot.
func TestFailNamesTheValue(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		snapshot bool // the value is there before the snapshot
		row      string
		want     string
	}{
		{"snapshot numeric NaN", true, `NULL, NULL, NULL, NULL, NULL, NULL), (2, 'NaN', NULL, NULL, NULL, NULL, NULL`, "table public.odd, column n, key id=2: value NaN: numeric NaN cannot be represented as decimal128(10,2)"},
		{"snapshot timestamp past arrow", true, `NULL, '294276-12-31 23:59:59', NULL, NULL, NULL, NULL`, "table public.odd, column ts, key id=1: value 294276-12-31 23:59:59: timestamp 294276-12-31 23:59:59 is outside the range of timestamp[us]"},
		{"stream timestamptz at infinity's microsecond", false, `NULL, NULL, '294247-01-10 04:00:54.775807+00', NULL, NULL, NULL`, "table public.odd, column tstz, key id=1: value 294247-01-10 04:00:54.775807+00: timestamp 294247-01-10 04:00:54.775807+00 is outside the range of timestamp[us] (294247-01-10 04:00:54.775806 UTC at most; the next microsecond carries infinity)"},
		{"stream 2-D array", false, `NULL, NULL, NULL, NULL, NULL, '{{1,2},{3,4}}'`, "table public.odd, column ia, key id=1: value {{1,2},{3,4}}: integer[] arrays of more than one dimension have no list<int32> value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := pgtest.NewDB(t)
			db.Exec(t, oddTable)
			insert := func() { db.Exec(t, "INSERT INTO odd VALUES (1, "+tc.row+")") }
			if tc.snapshot {
				insert()
			}
			src := startPlugin(t)
			r := startReading(t, src, settings(db, map[string]any{"tables": []string{"odd"}, "slot": slot(db)}), nil)
			defer r.stop()
			if !tc.snapshot {
				// Wait until the snapshot is done and the stream runs, then write the value.
				for {
					c := r.mustNext(time.Minute)
					if c.cp.Idle {
						break
					}
				}
				insert()
			}
			err := r.readErr(time.Minute)
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q\nwant one containing %q", err, tc.want)
			}
			if c := fault.ClassOf(err); c != fault.Data {
				t.Errorf("class %v, want data (the pipeline stops as failed instead of retrying)", c)
			}
			if fix := fault.FixOf(err); !strings.Contains(fix, "on_unrepresentable: null_and_record") {
				t.Errorf("fix %q does not name the setting", fix)
			}
		})
	}
}

// TestNullAndRecordIntoTestdest: the same values, snapshot and stream, into the conformance kit's file
// destination (a real plugin process): each unrepresentable value is NULL with its record, the rest kept.
func TestNullAndRecordIntoTestdest(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "skippr-plugin-testdest")
	if out, err := exec.Command("go", "build", "-o", bin, "../testdest").CombinedOutput(); err != nil {
		t.Fatalf("build testdest: %v\n%s", err, out)
	}
	db := pgtest.NewDB(t)
	db.Exec(t, oddTable)
	insertOdd(t, db, "odd", oddRows, 0)
	dir := t.TempDir()
	src, dst := startPlugin(t), conformance.Start(t, bin, nil)
	dstSet, _ := json.Marshal(map[string]any{"dir": dir})
	p := newPipe(t, src, dst, settings(db, map[string]any{"tables": []string{"odd"}, "slot": slot(db), "on_unrepresentable": "null_and_record"}), dstSet)
	p.start()
	defer p.r.stop()
	p.catchUp(db, 2*time.Minute)
	insertOdd(t, db, "odd", oddRows, 100)
	p.catchUp(db, 2*time.Minute)

	st, err := filedest.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	rows := st.Tables["public.odd"]
	if len(rows) != 2*len(oddRows) {
		t.Fatalf("%d rows in testdest, want %d", len(rows), 2*len(oddRows))
	}
	for _, base := range []int{0, 100} {
		for i, want := range oddChanges {
			id := base + i + 1
			row := rows[fmt.Sprint(id)]
			var have []string
			if m, ok := row[change.MetaColumn].(string); ok {
				var meta values.Meta
				if err := json.Unmarshal([]byte(m), &meta); err != nil {
					t.Fatalf("id %d: %v", id, err)
				}
				for _, c := range meta.Changes {
					have = append(have, c.Column+"="+c.Value)
					if c.Column != "arr" && !strings.HasPrefix(c.Value, "[") && row[c.Column] != nil {
						t.Errorf("id %d: column %s holds %v, want NULL", id, c.Column, row[c.Column])
					}
				}
			} else if row[change.MetaColumn] != nil {
				t.Errorf("id %d: %s is %T", id, change.MetaColumn, row[change.MetaColumn])
			}
			if !slices.Equal(have, want) {
				t.Errorf("id %d: recorded %q, want %q", id, have, want)
			}
		}
		// ±infinity travels as int64's extremes (testdest keeps timestamps as numbers); the microsecond
		// before infinity's is a value.
		for _, c := range []struct {
			id        int
			col, want string
		}{{base + 3, "ts", "-9223372036854775807"}, {base + 2, "tstz", "9223372036854775807"}, {base + 4, "ts", "9223372036854775806"}} {
			if got := fmt.Sprint(rows[fmt.Sprint(c.id)][c.col]); got != c.want {
				t.Errorf("id %d: %s = %s, want %s µs", c.id, c.col, got, c.want)
			}
		}
	}
}
