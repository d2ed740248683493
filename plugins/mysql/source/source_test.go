package source

import (
	"errors"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"vitess.io/vitess/go/mysql/replication"
	"vitess.io/vitess/go/sqltypes"
	querypb "vitess.io/vitess/go/vt/proto/query"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugins/mysql/config"
)

// TestParseBinlogStatus reads the status results of the server flavours by column name: MySQL 8.4's SHOW
// BINARY LOG STATUS (a GTID set wrapped over lines, as the server prints long sets) and MariaDB's SHOW MASTER
// STATUS (no GTID column).
func TestParseBinlogStatus(t *testing.T) {
	str := func(s string) sqltypes.Value { return sqltypes.NewVarChar(s) }
	for _, tc := range []struct {
		name     string
		fields   []string
		row      []sqltypes.Value
		file     string
		pos      uint64
		gtid     string
		gtidKeep bool
	}{
		{"mysql 8.4", []string{"File", "Position", "Binlog_Do_DB", "Binlog_Ignore_DB", "Executed_Gtid_Set"},
			[]sqltypes.Value{str("binlog.000042"), str("157"), str(""), str(""), str("3e11fa47-71ca-11e1-9e33-c80aa9429562:1-77,\n4e11fa47-71ca-11e1-9e33-c80aa9429562:1-5")},
			"binlog.000042", 157, "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-77,4e11fa47-71ca-11e1-9e33-c80aa9429562:1-5", true},
		{"mariadb", []string{"File", "Position", "Binlog_Do_DB", "Binlog_Ignore_DB"},
			[]sqltypes.Value{str("mariadb-bin.000003"), str("1242"), str(""), str("")}, "mariadb-bin.000003", 1242, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := &sqltypes.Result{Rows: [][]sqltypes.Value{tc.row}}
			for _, f := range tc.fields {
				res.Fields = append(res.Fields, &querypb.Field{Name: f})
			}
			file, pos, gtid := parseBinlogStatus(res)
			if file != tc.file || pos != tc.pos || gtid != tc.gtid {
				t.Fatalf("got %s:%d %q, want %s:%d %q", file, pos, gtid, tc.file, tc.pos, tc.gtid)
			}
			if tc.gtidKeep {
				// The set must be one streaming can start from and extend.
				p, err := replication.ParsePosition(replication.Mysql56FlavorID, gtid)
				if err != nil {
					t.Fatal(err)
				}
				g, err := replication.ParseGTID(replication.Mysql56FlavorID, "4e11fa47-71ca-11e1-9e33-c80aa9429562:6")
				if err != nil {
					t.Fatal(err)
				}
				if got := replication.AppendGTID(p, g).String(); !strings.Contains(got, "4e11fa47-71ca-11e1-9e33-c80aa9429562:1-6") {
					t.Errorf("after the next transaction: %s", got)
				}
			}
		})
	}
}

// TestMySQLRefusesLockFreeSnapshot: with snapshot_locking none a MySQL snapshot is refused before any
// statement, naming the settings that fix it.
func TestMySQLRefusesLockFreeSnapshot(t *testing.T) {
	_, _, err := openSnapshots(nil, config.Settings{SnapshotLocking: config.LockingNone}, flavorMySQL)
	if !errors.Is(err, fault.ErrConfig) || !strings.Contains(fault.FixOf(err), "snapshot_locking: minimal") {
		t.Fatalf("got %v (fix %q), want a config error naming snapshot_locking: minimal", err, fault.FixOf(err))
	}
}

func TestPositionRoundTrip(t *testing.T) {
	p := Position{V: positionVersion, Phase: PhaseSnapshot, Flavor: flavorMariaDB, File: "binlog.000001", Pos: 4, GTID: "0-1-5",
		Tables: []string{"a", "b"}, Table: "a", Progress: map[string]TableProgress{"a": {Key: []string{"10"}, Rows: 10}}}
	got, err := DecodePosition(p.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Encode()) != string(p.Encode()) {
		t.Fatalf("round trip: %s, want %s", got.Encode(), p.Encode())
	}
	for _, bad := range []string{`{"v":2}`, `{"v":1,"phase":"x","flavor":"mariadb","file":"f"}`, `{"v":1,"phase":"stream","flavor":"mariadb"}`,
		`{"v":1,"phase":"snapshot","flavor":"mariadb","file":"f","tables":["a"],"progress":{"b":{}}}`} {
		if _, err := DecodePosition([]byte(bad)); err == nil {
			t.Errorf("%s decoded", bad)
		}
	}
}

func TestBefore(t *testing.T) {
	for _, tc := range []struct {
		f1   string
		p1   uint64
		f2   string
		p2   uint64
		want bool
	}{
		{"binlog.000001", 100, "binlog.000001", 200, true},
		{"binlog.000001", 200, "binlog.000001", 200, false},
		{"binlog.000002", 4, "binlog.000001", 9000, false},
		{"binlog.000009", 4, "binlog.000010", 4, true},
	} {
		if got := before(tc.f1, tc.p1, tc.f2, tc.p2); got != tc.want {
			t.Errorf("before(%s:%d, %s:%d) = %v", tc.f1, tc.p1, tc.f2, tc.p2, got)
		}
	}
}

func TestParseElems(t *testing.T) {
	got := parseElems(`enum('a','b''q','ü','x,y')`)
	want := []string{"a", "b'q", "ü", "x,y"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// TestBinlogForms: the binary log's forms of ENUM (a number) and SET (a bitmap) read as the snapshot's text.
func TestBinlogForms(t *testing.T) {
	mem := memory.NewGoAllocator()
	for _, tc := range []struct {
		kind Kind
		in   []byte
		want string
	}{
		{KindEnum, []byte("2"), "b'q"},
		{KindEnum, []byte("0"), ""},
		{KindSet, []byte{0b101}, "a,ü"},
		{KindSet, []byte{0}, ""},
	} {
		col := &Column{Name: "c", Kind: tc.kind, Elems: []string{"a", "b'q", "ü"}}
		b := array.NewStringBuilder(mem)
		if err := appendValue(b, col, tc.in, true, false); err != nil {
			t.Fatal(err)
		}
		if got := b.NewStringArray().Value(0); got != tc.want {
			t.Errorf("%v %v: got %q, want %q", tc.kind, tc.in, got, tc.want)
		}
	}
}

func TestParseTime(t *testing.T) {
	for in, want := range map[string]int64{
		"838:59:59": 3020399000000, "-838:59:59.000000": -3020399000000, "-00:00:00.5": -500000,
		"00:00:01.000001": 1000001, "24:00:00": 86400000000,
	} {
		got, err := parseTime(in)
		if err != nil || got != want {
			t.Errorf("parseTime(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
}

// TestAfterKey: a composite key's resume condition is spelled out per column, numbers unquoted (a quoted
// number compares as a double, wrong above 2^53), binary keys as hex literals.
func TestAfterKey(t *testing.T) {
	tb := &Table{Stream: "d.t", Columns: []Column{{Name: "a", Kind: KindUint64}, {Name: "b", Kind: KindString}, {Name: "c", Kind: KindBinary}}, Key: []int{0, 1, 2}}
	got, err := afterKey(tb, []string{"18446744073709551615", "it's", "00ff"})
	if err != nil {
		t.Fatal(err)
	}
	want := "(`a` > 18446744073709551615) OR (`a` = 18446744073709551615 AND `b` > 'it\\'s') OR (`a` = 18446744073709551615 AND `b` = 'it\\'s' AND `c` > X'00ff')"
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	if _, err := afterKey(tb, []string{"1; DROP TABLE t", "x", "00"}); err == nil {
		t.Fatal("a non-number key was accepted")
	}
}
