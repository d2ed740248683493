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

const typesTable = `CREATE TABLE t (id int PRIMARY KEY,
	ti tinyint, tiu tinyint unsigned, si smallint, siu smallint unsigned, mi mediumint, miu mediumint unsigned,
	i int, iu int unsigned, bi bigint, biu bigint unsigned,
	d decimal(65,30), d2 decimal(10,2), f float, db double, bt bit(12), b1 bit(1),
	dt date, dtm datetime(6), ts timestamp(6) NULL, tm time(6), tm0 time, yr year,
	s varchar(50), tx text, ch char(5), bn binary(4), vb varbinary(10), bl blob,
	e enum('a','b''q','ü'), st set('x','y','z'), j json)`

// typesRows are edge values of every type, and a row of nulls.
const typesRows = `INSERT INTO t VALUES
	(1, -128, 255, -32768, 65535, -8388608, 16777215, -2147483648, 4294967295, -9223372036854775808, 18446744073709551615,
	 '-12345678901234567890123456789012345.123456789012345678901234567890', 12345678.99, 3.1415927, 1.7976931348623157e308,
	 b'101010101010', b'1', '1000-01-01', '9999-12-31 23:59:59.999999', '2038-01-19 03:14:07.999999', '838:59:59.000000',
	 '-838:59:59', 1901, '😀 héllo wörld', 'héllo 😀', 'ab', X'00010200', X'ff00', X'deadbeef00',
	 'b''q', 'x,z', '{"a": [1, 2.5, "😀"], "b": null}'),
	(2, 127, 0, 32767, 0, 8388607, 0, 2147483647, 0, 9223372036854775807, 9223372036854775808,
	 '0.000000000000000000000000000001', -0.01, -1.17549435e-38, 5e-324,
	 b'0', b'0', '9999-12-31', '1000-01-01 00:00:00.000001', '1970-01-01 00:00:01.000000', '-00:00:00.500000',
	 '00:00:00', 2155, '', '', '', X'', X'', X'',
	 'ü', '', '[]'),
	(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
	 NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)`

// TestSnapshotMatchesBinlog copies rows of every type by the snapshot, then inserts the same values under
// other keys so they arrive through the binary log: both must be the same Arrow values, and the edge values
// must be right.
func TestSnapshotMatchesBinlog(t *testing.T) {
	t.Parallel()
	db := mysqltest.NewDB(t)
	db.Exec(t, typesTable+"; "+typesRows)
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
