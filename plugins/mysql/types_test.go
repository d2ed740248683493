package main

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugins/mysql/source"
	"github.com/skippr-dev/skippr/testkit/mysqltest"
)

// TestSnapshotMatchesBinlog copies rows of every type by the snapshot, then inserts the same values under
// other keys so they arrive through the binary log: both must be the same Arrow values, and the edge values
// must be right.
func TestSnapshotMatchesBinlog(t *testing.T) {
	t.Parallel()
	db := mysqltest.NewDB(t)
	db.Exec(t, mysqltest.TypesTable+"; "+mysqltest.TypesRows)
	set := settings(db, map[string]any{"tables": []string{"t"}})
	r := startReading(t, startPlugin(t), set, nil)
	s := newState()
	for {
		c, err := r.Next(time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		s.apply(t, c)
		if position(t, c.Checkpoint.Position).Phase == source.PhaseStream {
			break
		}
	}
	db.Exec(t, `INSERT INTO t SELECT id + 100, ti, tiu, si, siu, mi, miu, i, iu, bi, biu, d, d2, f, db, bt, b1, dt, dtm, ts, tm, tm0, yr,
		s, tx, ch, bn, vb, bl, e, st, j FROM t WHERE id <= 3`)
	catchUp(t, r, s, db)
	rows := s.rows[db.Name+".t"]
	for _, id := range []string{"1", "2", "3"} {
		snap, bin := rows[id], rows["10"+id]
		if snap == "" || bin == "" {
			t.Fatalf("row %s: snapshot %q, binlog %q", id, snap, bin)
		}
		snap = strings.TrimPrefix(snap, "id="+id+" ")
		bin = strings.TrimPrefix(bin, "id=10"+id+" ")
		if snap != bin {
			sf, bf := strings.Split(snap, " "), strings.Split(bin, " ")
			for i := range min(len(sf), len(bf)) {
				if sf[i] != bf[i] {
					t.Errorf("row %s: snapshot %s, binlog %s", id, sf[i], bf[i])
				}
			}
		}
	}
	for _, want := range []string{
		"biu=18446744073709551615", "bi=-9223372036854775808", "tiu=255", "miu=16777215",
		"d=-12345678901234567890123456789012345.12345678901234567890123456789", "d2=12345678.99",
		"f=3.1415927", "db=1.7976931348623157e+308", "bt=2730", "b1=1",
		"dt=1000-01-01", "dtm=9999-12-31T23:59:59.999999", "ts=2038-01-19T03:14:07.999999Z",
		"tm=3020399000000us", "tm0=-3020399000000us", "yr=1901",
		"s=😀", "tx=héllo", "bn=00010200", "vb=ff00", "e=b'q", "st=x,z", `j={"a":`,
	} {
		if !strings.Contains(rows["1"], want) {
			t.Errorf("row 1 lacks %s:\n%s", want, rows["1"])
		}
	}
	for _, want := range []string{"biu=9223372036854775808", "d=1e-30", "bn=00000000", "tm=-500000us", "e=ü", "st= ", "j=[]"} {
		if !strings.Contains(rows["2"], want) {
			t.Errorf("row 2 lacks %s:\n%s", want, rows["2"])
		}
	}
}

// TestZeroDate: a zero date stops the pipeline with a data error naming the setting, or arrives as null
// with zero_date: null.
func TestZeroDate(t *testing.T) {
	t.Parallel()
	db := mysqltest.NewDB(t)
	db.Exec(t, `SET SESSION sql_mode = ''; CREATE TABLE z (id int PRIMARY KEY, d date, dt datetime);
		INSERT INTO z VALUES (1, '0000-00-00', '2024-00-10 10:00:00')`)
	err := startReading(t, startPlugin(t), settings(db, map[string]any{"tables": []string{"z"}}), nil).Err(time.Minute)
	if !errors.Is(err, fault.ErrData) || !strings.Contains(err.Error(), "zero_date: null") {
		t.Errorf("zero date with the default setting: %v, want a data error naming zero_date: null", err)
	}
	r := startReading(t, startPlugin(t), settings(db, map[string]any{"tables": []string{"z"}, "zero_date": "null"}), nil)
	s := newState()
	for {
		c, err := r.Next(time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		s.apply(t, c)
		if position(t, c.Checkpoint.Position).Phase == source.PhaseStream {
			break
		}
	}
	if got := s.rows[db.Name+".z"]["1"]; got != "id=1 d=NULL dt=NULL" {
		t.Errorf("zero dates with zero_date: null arrived as %q", got)
	}
}

// TestEnumMembersCharsets: ENUM and SET members outside utf8mb3 (an emoji) and in latin1 arrive the same from
// the snapshot and the binary log. information_schema shows '😀' as '?', so the stream takes the members from
// the table map (binlog_row_metadata=FULL), in the column's character set.
func TestEnumMembersCharsets(t *testing.T) {
	t.Parallel()
	db := mysqltest.NewDB(t)
	db.Exec(t, `CREATE TABLE t (id int PRIMARY KEY, e ENUM('😀', 'a', 'ß'), l ENUM('é', 'ü', 'x') CHARACTER SET latin1,
			s SET('😀', 'b', 'é'), ls SET('é', 'q', 'Ω?') CHARACTER SET latin1);
		INSERT INTO t VALUES (1, '😀', 'é', '😀,b', 'é,q'), (2, 'ß', 'ü', 'é', 'q'), (3, 'a', 'x', '', 'é')`)
	r := startReading(t, startPlugin(t), settings(db, map[string]any{"tables": []string{"t"}}), nil)
	s := newState()
	for {
		c := r.MustNext(time.Minute)
		s.apply(t, c)
		if position(t, c.Checkpoint.Position).Phase == source.PhaseStream {
			break
		}
	}
	db.Exec(t, `INSERT INTO t SELECT id + 100, e, l, s, ls FROM t`)
	catchUp(t, r, s, db)
	rows := s.rows[db.Name+".t"]
	for id, want := range map[string]string{
		"1": "e=😀 l=é s=😀,b ls=é,q",
		"2": "e=ß l=ü s=é ls=q",
		"3": "e=a l=x s= ls=é",
	} {
		if snap := strings.TrimPrefix(rows[id], "id="+id+" "); snap != want {
			t.Errorf("row %s from the snapshot: %q, want %q", id, snap, want)
		}
		if bin := strings.TrimPrefix(rows["10"+id], "id=10"+id+" "); bin != want {
			t.Errorf("row %s from the binary log: %q, want %q", id, bin, want)
		}
	}
}
