package source

import (
	"strconv"
	"syscall"
	"testing"
	"time"

	"vitess.io/vitess/go/mysql"
	"vitess.io/vitess/go/sqltypes"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/mempool"
	"github.com/skippr-dev/skippr/plugins/mysql/config"
	"github.com/skippr-dev/skippr/testkit/mysqltest"
)

// BenchmarkRowRead reads the rows of a 1M-row table of the bench's six columns (bench/mysql.go) from MariaDB:
// by resultSet (what the snapshot reads with) and by vitess's FetchNext (what it read with before), the cells
// only (read/…) and turned into Arrow batches of 10000 rows as the snapshot does (snapshot/…). One op is one
// row. cpu-ns/row is this process's CPU time per row: the server's is not in it, while ns/op also counts the
// wait for the server, which on two cores is most of it.
func BenchmarkRowRead(b *testing.B) {
	const rows = 1_000_000
	db := mysqltest.NewDB(b)
	db.Exec(b, `CREATE TABLE snap (id bigint PRIMARY KEY, name varchar(40), amount decimal(12,2), at datetime(6), doc json, flag bool)`)
	db.Exec(b, `INSERT INTO snap SELECT seq, concat('name-', seq), (seq % 1000000) / 100.0, now(6), json_object('k', seq % 100, 'tag', 'bench'), seq % 2 = 0
		FROM seq_1_to_`+strconv.Itoa(rows))
	cfg := config.Settings{Host: db.Server.Host, Port: db.Server.Port, User: "root", Database: db.Name, ZeroDate: config.ZeroDateError}
	c, err := cfg.Connect(b.Context())
	if err != nil {
		b.Fatal(err)
	}
	tbl, err := loadTable(c, cfg, "snap")
	c.Close()
	if err != nil {
		b.Fatal(err)
	}
	r := &reader{cfg: cfg, mem: mempool.New()}
	names := selectedNames(tbl)
	q, err := r.selectInKeyOrder(tbl, nil)
	if err != nil {
		b.Fatal(err)
	}

	// each reads n rows of the table and hands each row's cells to use.
	type reading func(b *testing.B, c *mysql.Conn, n int, use func([][]byte))
	byResultSet := func(b *testing.B, c *mysql.Conn, n int, use func([][]byte)) {
		var rs resultSet
		if err := rs.start(c, q+" LIMIT "+strconv.Itoa(n), names); err != nil {
			b.Fatal(err)
		}
		for {
			row, err := rs.next()
			if err != nil {
				b.Fatal(err)
			}
			if row == nil {
				return
			}
			use(row)
		}
	}
	byFetchNext := func(b *testing.B, c *mysql.Conn, n int, use func([][]byte)) {
		if err := c.ExecuteStreamFetch(q + " LIMIT " + strconv.Itoa(n)); err != nil {
			b.Fatal(err)
		}
		var (
			row []sqltypes.Value
			err error
		)
		cells := make([][]byte, len(names))
		for {
			row, err = c.FetchNext(row[:0])
			if err != nil {
				b.Fatal(err)
			}
			if row == nil {
				return
			}
			for i := range row {
				cells[i] = nil
				if !row[i].IsNull() {
					cells[i] = row[i].Raw()
				}
			}
			use(cells)
		}
	}
	for _, toArrow := range []bool{false, true} {
		for _, rd := range []struct {
			name string
			read reading
		}{{"resultSet", byResultSet}, {"FetchNext", byFetchNext}} {
			name := "read/" + rd.name
			if toArrow {
				name = "snapshot/" + rd.name
			}
			b.Run(name, func(b *testing.B) {
				c, err := cfg.Connect(b.Context())
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				var (
					rb    *rowBatch
					inRec int
					bytes int64
				)
				use := func(row [][]byte) {
					for _, cell := range row {
						bytes += int64(len(cell))
					}
					if !toArrow {
						return
					}
					if rb == nil {
						rb = r.newBatch(tbl)
						rb.Reserve(10_000)
					}
					if err := r.appendRow(rb, tbl, row, change.OpRead, ""); err != nil {
						b.Fatal(err)
					}
					if inRec++; inRec == 10_000 {
						rb.NewRecordBatch().Release()
						rb.Reserve(10_000)
						inRec = 0
					}
				}
				b.ReportAllocs()
				cpu0 := cpuTime()
				b.ResetTimer()
				for left := b.N; left > 0; left -= rows {
					rd.read(b, c, min(left, rows), use)
				}
				b.StopTimer()
				b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/row")
				if rb != nil {
					rb.Release()
				}
				if bytes == 0 {
					b.Fatal("no cell had a byte")
				}
			})
		}
	}
}

// cpuTime is the CPU time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
