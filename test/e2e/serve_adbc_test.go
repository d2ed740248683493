package e2e

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-adbc/go/adbc/driver/flightsql"
	"github.com/apache/arrow-adbc/go/adbc/sqldriver"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	flightsqlclient "github.com/apache/arrow-go/v18/arrow/flight/flightsql"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/skippr-dev/skippr/test/harness"
)

// adbcDB opens skippr serve at addr through the ADBC Flight SQL driver behind database/sql — what a Go
// program (and, with the same options, Python's adbc_driver_flightsql) uses — authenticated with token.
func adbcDB(addr, token string) (*sql.DB, error) {
	conn, err := sqldriver.Driver{Driver: flightsql.NewDriver(memory.DefaultAllocator)}.OpenConnector(
		fmt.Sprintf("uri=grpc://%s;%s=Bearer %s", addr, flightsql.OptionAuthorizationHeader, token))
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(conn), nil
}

// adbcRows runs query with args through database/sql and returns its rows as JSON objects, as `skippr query
// --json` prints them (through encoding/json, so numbers compare alike).
// With args the statement is prepared first: Flight SQL binds parameters only to a prepared statement, and the
// ADBC driver takes parameters bound to an unprepared one for a bulk ingestion.
func adbcRows(ctx context.Context, db *sql.DB, query string, args ...any) ([]any, error) {
	var rows *sql.Rows
	var err error
	if len(args) > 0 {
		st, perr := db.PrepareContext(ctx, query)
		if perr != nil {
			return nil, perr
		}
		defer st.Close()
		rows, err = st.QueryContext(ctx, args...)
	} else {
		rows, err = db.QueryContext(ctx, query)
	}
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	out := []map[string]any{}
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		row := map[string]any{}
		for i, c := range cols {
			row[c] = vals[i]
		}
		out = append(out, row)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, err
	}
	var back []any
	return back, json.Unmarshal(b, &back)
}

// served is a running `skippr serve`.
type served struct {
	Addr   string      // the Flight SQL address it logged
	Stderr *syncBuffer // its log
	Cmd    *exec.Cmd
	Stop   func() // SIGTERM, then wait; the test's end runs it too
}

// startServe starts `skippr serve` with args (after --addr 127.0.0.1:0) and waits for its address.
func startServe(t *testing.T, ctx context.Context, e *harness.Env, args ...string) served {
	t.Helper()
	cmd := e.Cmd(ctx, append([]string{"serve", "--addr", "127.0.0.1:0"}, args...)...)
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cmd.Process.Signal(syscall.SIGTERM)
			cmd.Wait()
		})
	}
	t.Cleanup(stop)
	var addr string
	harness.WaitFor(t, 2*time.Minute, func() bool {
		if cmd.ProcessState != nil {
			t.Fatalf("skippr serve ended:\n%s", stderr.String())
		}
		if m := serveAddrLog.FindStringSubmatch(stderr.String()); m != nil {
			addr = m[1]
		}
		return addr != ""
	})
	return served{Addr: addr, Stderr: stderr, Cmd: cmd, Stop: stop}
}

// flightMatrixRows reads sql's rows from a Flight SQL server (no token: a loopback server), by id, in Arrow's
// own JSON form of each value (GetOneForMarshal, the form iceberg-go's scan prints), numbers kept exact.
func flightMatrixRows(t *testing.T, ctx context.Context, addr, sql string) map[string]map[string]any {
	t.Helper()
	cl, err := flightsqlclient.NewClient(addr, nil, nil, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	info, err := cl.Execute(ctx, sql)
	if err != nil {
		t.Fatal(err)
	}
	rdr, err := cl.DoGet(ctx, info.Endpoint[0].Ticket)
	if err != nil {
		t.Fatal(err)
	}
	defer rdr.Release()
	out := map[string]map[string]any{}
	for rdr.Next() {
		rec := rdr.RecordBatch()
		for i := 0; i < int(rec.NumRows()); i++ {
			row := map[string]any{}
			for c := 0; c < int(rec.NumCols()); c++ {
				row[rec.ColumnName(c)] = rec.Column(c).GetOneForMarshal(i)
				// Arrow's JSON form of a time goes through time.Time, which turns PostgreSQL's 24:00:00
				// (86,400,000,000 µs, which the batch holds) into 00:00:00: print the microseconds instead.
				if tc, ok := rec.Column(c).(*array.Time64); ok && tc.IsValid(i) {
					us := int64(tc.Value(i))
					if tc.DataType().(*arrow.Time64Type).Unit == arrow.Nanosecond {
						us /= 1000
					}
					row[rec.ColumnName(c)] = fmt.Sprintf("%02d:%02d:%02d.%06d", us/3600e6, us/60e6%60, us/1e6%60, us%1e6)
				}
			}
			b, err := json.Marshal(row)
			if err != nil {
				t.Fatal(err)
			}
			dec := json.NewDecoder(bytes.NewReader(b))
			dec.UseNumber()
			var back map[string]any
			if err := dec.Decode(&back); err != nil {
				t.Fatal(err)
			}
			out[fmt.Sprint(back["id"])] = back
		}
	}
	if err := rdr.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
