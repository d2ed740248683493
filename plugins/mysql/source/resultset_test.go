package source

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"vitess.io/vitess/go/mysql"
	"vitess.io/vitess/go/mysql/sqlerror"
	"vitess.io/vitess/go/vt/vttls"

	"github.com/skippr-dev/skippr/plugin-sdk/mempool"
	"github.com/skippr-dev/skippr/plugins/mysql/config"
	"github.com/skippr-dev/skippr/testkit/mysqltest"
)

// connect opens a vitess connection to db as the source does (utf8mb4, UTC), with or without
// CLIENT_DEPRECATE_EOF, closed when the test ends.
func connect(t testing.TB, db *mysqltest.DB, deprecateEOF bool) *mysql.Conn {
	t.Helper()
	cfg := config.Settings{Host: db.Server.Host, Port: db.Server.Port, User: "root", Database: db.Name}
	p := cfg.Params(vttls.Disabled)
	p.DisableClientDeprecateEOF = !deprecateEOF
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := mysql.Connect(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if _, err := c.ExecuteFetch("SET NAMES utf8mb4, time_zone = '+00:00'", 0, false); err != nil {
		t.Fatal(err)
	}
	if got := c.Capabilities&mysql.CapabilityClientDeprecateEOF != 0; got != deprecateEOF {
		t.Fatalf("CLIENT_DEPRECATE_EOF is %v, want %v", got, deprecateEOF)
	}
	return c
}

// fetchAll reads q's rows through vitess's FetchNext: copies of the cells, nil for NULL.
func fetchAll(t *testing.T, c *mysql.Conn, q string) [][][]byte {
	t.Helper()
	if err := c.ExecuteStreamFetch(q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	var rows [][][]byte
	for {
		row, err := c.FetchNext(nil)
		if err != nil {
			t.Fatalf("%s: FetchNext: %v", q, err)
		}
		if row == nil {
			return rows
		}
		cells := make([][]byte, len(row))
		for i, v := range row {
			if !v.IsNull() {
				cells[i] = append([]byte{}, v.Raw()...)
			}
		}
		rows = append(rows, cells)
	}
}

// readAll reads q's rows through resultSet, copying each row before the next is read.
func readAll(t *testing.T, c *mysql.Conn, q string, names []string) [][][]byte {
	t.Helper()
	var rs resultSet
	if err := rs.start(c, q, names); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	var rows [][][]byte
	for {
		row, err := rs.next()
		if err != nil {
			t.Fatalf("%s: next: %v", q, err)
		}
		if row == nil {
			return rows
		}
		cells := make([][]byte, len(row))
		for i, v := range row {
			if v != nil {
				cells[i] = append([]byte{}, v...)
			}
		}
		rows = append(rows, cells)
	}
}

// selectOne runs SELECT 1 on c: the connection must be ready for the next query.
func selectOne(t *testing.T, c *mysql.Conn) {
	t.Helper()
	res, err := c.ExecuteFetch("SELECT 1", 1, false)
	if err != nil {
		t.Fatalf("SELECT 1 after the result set: %v", err)
	}
	if len(res.Rows) != 1 || res.Rows[0][0].ToString() != "1" {
		t.Fatalf("SELECT 1 after the result set returned %v", res.Rows)
	}
}

// TestResultSetMatchesFetchNext reads results of every column type the source maps (the types of
// TestSnapshotMatchesBinlog), NULLs, empty strings and values, rows over 16 MiB (a packet of exactly 0xffffff
// bytes and an empty one after it; a row whose first cell is longer than 2^24 bytes, so it starts with 0xfe
// like the result's end), an empty result and a one-row result, through resultSet and through vitess's
// FetchNext, with and without CLIENT_DEPRECATE_EOF: the cells must be the same bytes, NULL the same cells, and
// the connection must run the next query.
func TestResultSetMatchesFetchNext(t *testing.T) {
	db := mysqltest.NewDB(t)
	// A row over 16 MiB needs max_allowed_packet above it (MariaDB's default is 16 MiB), for the INSERT and
	// the SELECT. Raising it on the shared server changes nothing another test relies on.
	db.Server.Exec(t, "SET GLOBAL max_allowed_packet = 64 * 1024 * 1024")
	db.Exec(t, mysqltest.TypesTable+"; "+mysqltest.TypesRows)
	db.Exec(t, `INSERT INTO t (id, s, bl, tx) SELECT 3 + seq, IF(seq % 3 = 0, NULL, ''), repeat('b', seq % 300), repeat('é', seq % 100) FROM seq_1_to_2000`)
	db.Exec(t, `CREATE TABLE empty (id int PRIMARY KEY, v text)`)
	// 16777211 bytes + the 4 of their length make a one-cell row of exactly 0xffffff bytes: an empty packet
	// must follow it.
	db.Exec(t, `CREATE TABLE big (id int PRIMARY KEY, b longblob, after varchar(10));
		INSERT INTO big VALUES (1, repeat('x', 17 * 1024 * 1024), 'after'), (2, 'small', NULL),
			(3, repeat('y', 16777211), ''), (4, NULL, 'end'), (5, repeat('z', 16777216), 'z')`)

	typeCols := strings.Fields("id ti tiu si siu mi miu i iu bi biu d d2 f db bt b1 dt dtm ts tm tm0 yr s tx ch bn vb bl e st j")
	cases := []struct {
		name  string
		query string
		names []string
		rows  int
	}{
		{"every type", "SELECT * FROM t ORDER BY id", typeCols, 2003},
		{"one row", "SELECT * FROM t WHERE id = 2", typeCols, 1},
		{"float as double", "SELECT id, CAST(f AS DOUBLE) AS f FROM t WHERE id <= 3 ORDER BY id", []string{"id", "f"}, 3},
		{"empty table", "SELECT id, v FROM empty", []string{"id", "v"}, 0},
		{"no row matches", "SELECT * FROM t WHERE id < 0", typeCols, 0},
		{"rows over 16 MiB", "SELECT id, b, after FROM big ORDER BY id", []string{"id", "b", "after"}, 5},
		{"a first cell over 16 MiB", "SELECT b, id FROM big ORDER BY id", []string{"b", "id"}, 5},
		{"a row of exactly 0xffffff bytes", "SELECT b FROM big WHERE id = 3", []string{"b"}, 1},
	}
	for _, deprecateEOF := range []bool{true, false} {
		c := connect(t, db, deprecateEOF)
		for _, tc := range cases {
			t.Run(fmt.Sprintf("%s/deprecate_eof=%v", tc.name, deprecateEOF), func(t *testing.T) {
				want := fetchAll(t, c, tc.query)
				got := readAll(t, c, tc.query, tc.names)
				selectOne(t, c)
				if len(want) != tc.rows {
					t.Fatalf("FetchNext read %d rows, the test wants %d", len(want), tc.rows)
				}
				if len(got) != len(want) {
					t.Fatalf("resultSet read %d rows, FetchNext %d", len(got), len(want))
				}
				for r := range want {
					if len(got[r]) != len(want[r]) {
						t.Fatalf("row %d: %d cells, FetchNext %d", r, len(got[r]), len(want[r]))
					}
					for i := range want[r] {
						g, w := got[r][i], want[r][i]
						if (g == nil) != (w == nil) || !bytes.Equal(g, w) {
							t.Errorf("row %d column %s: %s, FetchNext %s", r, tc.names[i], show(g), show(w))
						}
					}
				}
			})
		}
	}
}

// TestResultSetBuffer: rows share one buffer, and a row too big for it gets one of its own that the next
// small row drops, so a big BLOB does not pin its size for the rest of the table.
func TestResultSetBuffer(t *testing.T) {
	db := mysqltest.NewDB(t)
	db.Server.Exec(t, "SET GLOBAL max_allowed_packet = 64 * 1024 * 1024") // as in TestResultSetMatchesFetchNext
	db.Exec(t, `CREATE TABLE b (id int PRIMARY KEY, v longblob);
		INSERT INTO b VALUES (1, 'a'), (2, 'b'), (3, repeat('x', 3 * 1024 * 1024)), (4, 'c'), (5, 'd')`)
	c := connect(t, db, true)
	var rs resultSet
	if err := rs.start(c, "SELECT id, v FROM b ORDER BY id", []string{"id", "v"}); err != nil {
		t.Fatal(err)
	}
	var bufs []*byte
	for {
		row, err := rs.next()
		if err != nil {
			t.Fatal(err)
		}
		if row == nil {
			break
		}
		bufs = append(bufs, &rs.buf[:1][0])
		if len(row[1]) > keepBuf && cap(rs.buf) < len(row[1]) {
			t.Errorf("row %s of %d bytes in a buffer of %d", row[0], len(row[1]), cap(rs.buf))
		}
		if len(row[1]) < keepBuf && cap(rs.buf) > keepBuf {
			t.Errorf("row %s of %d bytes read into a buffer of %d: the big row's was kept", row[0], len(row[1]), cap(rs.buf))
		}
	}
	if len(bufs) != 5 || bufs[0] != bufs[1] || bufs[1] == bufs[2] || bufs[2] == bufs[3] || bufs[3] != bufs[4] {
		t.Errorf("buffers of the rows %v: want one for rows 1-2, the big row's own, one for rows 4-5", bufs)
	}
	selectOne(t, c)
}

// show is a cell for a test message: NULL, or its length and first bytes.
func show(b []byte) string {
	if b == nil {
		return "NULL"
	}
	return fmt.Sprintf("%d bytes %q", len(b), b[:min(len(b), 40)])
}

// TestResultSetRefusesWrongColumns: a result whose columns are not the ones the caller selects is an error
// naming both, and the connection is not used again.
func TestResultSetRefusesWrongColumns(t *testing.T) {
	db := mysqltest.NewDB(t)
	c := connect(t, db, true)
	var rs resultSet
	err := rs.start(c, "SELECT 1 AS a, 2 AS b", []string{"a", "c"})
	if err == nil || !strings.Contains(err.Error(), `column 1 is "b", the query selects "c"`) {
		t.Errorf("columns a, b read as a, c: %v", err)
	}
	err = rs.start(connect(t, db, false), "SELECT 1 AS a, 2 AS b", []string{"a"})
	if err == nil || !strings.Contains(err.Error(), "the result has 2 columns, the query selects 1") {
		t.Errorf("two columns read as one: %v", err)
	}
	// A server error names the query, as ExecuteStreamFetch's did, and leaves the connection usable.
	c = connect(t, db, true)
	rs = resultSet{}
	err = rs.start(c, "SELECT a FROM nosuch", []string{"a"})
	var se *sqlerror.SQLError
	if !errors.As(err, &se) || se.Number() != sqlerror.ERNoSuchTable || !strings.HasSuffix(err.Error(), "during query: SELECT a FROM nosuch") {
		t.Errorf("a missing table: %v", err)
	}
	selectOne(t, c)
	// A statement without a result set leaves the connection usable.
	c = connect(t, db, true)
	rs = resultSet{}
	if err := rs.start(c, "DO 1", []string{"a"}); err == nil {
		t.Error("DO 1 read as a result set")
	}
	selectOne(t, c)
}

// TestResultSetErrorAfterRows: a query that fails on a row after sending others ends in that error (an ERR
// packet in the middle of the rows), not in a short result, under both end-of-result forms; the connection then
// runs the next query.
func TestResultSetErrorAfterRows(t *testing.T) {
	db := mysqltest.NewDB(t)
	// The correlated subquery returns two rows (ER_SUBQUERY_NO_1_ROW) from the 1000th row on.
	const q = "SELECT seq AS id, IF(seq < 1000, seq, (SELECT seq UNION SELECT seq + 1)) AS v FROM seq_1_to_5000"
	for _, deprecateEOF := range []bool{true, false} {
		c := connect(t, db, deprecateEOF)
		var rs resultSet
		if err := rs.start(c, q, []string{"id", "v"}); err != nil {
			t.Fatal(err)
		}
		n := 0
		var err error
		for {
			var row [][]byte
			row, err = rs.next()
			if err != nil || row == nil {
				break
			}
			n++
		}
		var se *sqlerror.SQLError
		if !errors.As(err, &se) || se.Number() != sqlerror.ERSubqueryNo1Row {
			t.Errorf("deprecate_eof=%v: after %d rows the result ended with %v, want error %d (subquery returns more than 1 row)", deprecateEOF, n, err, sqlerror.ERSubqueryNo1Row)
		}
		if n == 0 || n >= 1000 {
			t.Errorf("deprecate_eof=%v: %d rows before the error, want some, fewer than 1000", deprecateEOF, n)
		}
		if row, err := rs.next(); row != nil || err != nil {
			t.Errorf("after the error: %v, %v; want the result over", row, err)
		}
		selectOne(t, c)
	}
}

// TestReadTableKilled: a snapshot query killed while its table is read (KILL QUERY from another session) fails
// the copy; no chunk says the table is done.
func TestReadTableKilled(t *testing.T) {
	db := mysqltest.NewDB(t)
	// ≈ 60 MB: more than the server and the kernel buffer before the reader takes it.
	db.Exec(t, `CREATE TABLE k (id bigint PRIMARY KEY, pad varchar(300))`)
	db.Exec(t, `INSERT INTO k SELECT seq, repeat(md5(seq), 9) FROM seq_1_to_200000`)
	raw, _ := json.Marshal(map[string]any{"host": db.Server.Host, "port": db.Server.Port, "user": "root", "database": db.Name,
		"tables": []string{"k"}, "batch_size": 1000})
	cfg, err := config.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	c := connect(t, db, true)
	tbl, err := loadTable(c, cfg, "k")
	if err != nil {
		t.Fatal(err)
	}
	r := &reader{cfg: cfg, mem: mempool.New()}
	out := make(chan chunk)
	errc := make(chan error, 1)
	go func() {
		errc <- r.readTable(context.Background(), c, tbl, nil, out)
		close(out)
	}()
	rows, chunks := 0, 0
	for ch := range out {
		if chunks == 0 {
			db.Exec(t, fmt.Sprintf("KILL QUERY %d", c.ConnectionID))
		}
		chunks++
		rows += ch.rows
		if ch.rec != nil {
			ch.rec.Release()
		}
		if ch.done {
			t.Errorf("a chunk says the table is done after %d of its 200000 rows", rows)
		}
	}
	err = <-errc
	var se *sqlerror.SQLError
	if !errors.As(err, &se) || se.Number() != sqlerror.ERQueryInterrupted {
		t.Errorf("the killed copy ended with %v after %d rows, want error %d (query interrupted)", err, rows, sqlerror.ERQueryInterrupted)
	}
	if rows >= 200000 {
		t.Errorf("all %d rows arrived: the kill came too late to test anything", rows)
	}
	t.Logf("killed after %d rows in %d chunks: %v", rows, chunks, err)
}
