package harness

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight/flightsql"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

var serveAddrLog = regexp.MustCompile(`msg="serving Flight SQL" addr=(\S+)`)

// Served is a running `skippr serve`.
type Served struct {
	Addr   string // the Flight SQL address it logged
	Cmd    *exec.Cmd
	stderr *lockedBuffer
	stop   func()
}

// Stderr is what the server has logged so far.
func (s *Served) Stderr() string { return s.stderr.String() }

// Stop sends SIGTERM and waits for the server; the test's end does it too.
func (s *Served) Stop() { s.stop() }

// StartServe starts `skippr serve --addr 127.0.0.1:0 args…` with the environment's config and waits (as long as
// the machine needs, up to two minutes) until it logs its address. env is added to the command's environment.
func (e *Env) StartServe(ctx context.Context, env []string, args ...string) *Served {
	e.T.Helper()
	cmd := e.Cmd(ctx, append([]string{"serve", "--addr", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(cmd.Env, env...)
	s := &Served{Cmd: cmd, stderr: &lockedBuffer{}}
	cmd.Stderr = s.stderr
	if err := cmd.Start(); err != nil {
		e.T.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	var once sync.Once
	s.stop = func() {
		once.Do(func() {
			cmd.Process.Signal(syscall.SIGTERM)
			<-exited
		})
	}
	e.T.Cleanup(s.stop)
	WaitFor(e.T, 2*time.Minute, func() bool {
		select {
		case <-exited:
			e.T.Fatalf("skippr serve ended:\n%s", s.stderr.String())
		default:
		}
		if m := serveAddrLog.FindStringSubmatch(s.stderr.String()); m != nil {
			s.Addr = m[1]
		}
		return s.Addr != ""
	})
	return s
}

// FlightClient is a Flight SQL client of a loopback server (no TLS, no token); the test's end closes it.
func FlightClient(t testing.TB, addr string) *flightsql.Client {
	t.Helper()
	cl, err := flightsql.NewClient(addr, nil, nil, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// FlightInt64s runs sql over Flight SQL and returns its rows, every column an int64 (cast in the SQL: DuckDB's
// sum of a BIGINT is a HUGEINT). A NULL is an error. The error of a failed statement is the gRPC status the
// server sent, for status.Code.
func FlightInt64s(ctx context.Context, cl *flightsql.Client, sql string) ([][]int64, error) {
	info, err := cl.Execute(ctx, sql)
	if err != nil {
		return nil, err
	}
	rdr, err := cl.DoGet(ctx, info.Endpoint[0].Ticket)
	if err != nil {
		return nil, err
	}
	defer rdr.Release()
	var rows [][]int64
	for rdr.Next() {
		rec := rdr.RecordBatch()
		for i := 0; i < int(rec.NumRows()); i++ {
			row := make([]int64, rec.NumCols())
			for c := range row {
				col, ok := rec.Column(c).(*array.Int64)
				if !ok {
					return nil, fmt.Errorf("%s: column %s is %s, not int64", sql, rec.ColumnName(c), rec.Column(c).DataType())
				}
				if col.IsNull(i) {
					return nil, fmt.Errorf("%s: column %s is NULL in row %d", sql, rec.ColumnName(c), len(rows))
				}
				row[c] = col.Value(i)
			}
			rows = append(rows, row)
		}
	}
	if err := rdr.Err(); err != nil {
		return nil, err
	}
	return rows, nil
}
