package e2e

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/flight/flightsql"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/skippr-dev/skippr/test/harness"
)

// syncBuffer is stderr of a running process, read while it writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

var serveAddrLog = regexp.MustCompile(`msg="serving Flight SQL" addr=(\S+)`)

// flightRows runs sql over Flight SQL (prepared when asked) and returns its rows as JSON objects, as
// `skippr query --json` prints them, and the result's schema.
func flightRows(ctx context.Context, cl *flightsql.Client, sql string, prepared bool) ([]any, *arrow.Schema, error) {
	var info *flight.FlightInfo
	var err error
	if prepared {
		ps, perr := cl.Prepare(ctx, sql)
		if perr != nil {
			return nil, nil, perr
		}
		defer ps.Close(context.Background())
		info, err = ps.Execute(ctx)
	} else {
		info, err = cl.Execute(ctx, sql)
	}
	if err != nil {
		return nil, nil, err
	}
	return readFlight(ctx, cl, info)
}

func readFlight(ctx context.Context, cl *flightsql.Client, info *flight.FlightInfo) ([]any, *arrow.Schema, error) {
	rdr, err := cl.DoGet(ctx, info.Endpoint[0].Ticket)
	if err != nil {
		return nil, nil, err
	}
	defer rdr.Release()
	rows := []any{}
	for rdr.Next() {
		rec := rdr.RecordBatch()
		for i := 0; i < int(rec.NumRows()); i++ {
			row := map[string]any{}
			for c := 0; c < int(rec.NumCols()); c++ {
				row[rec.ColumnName(c)] = rec.Column(c).GetOneForMarshal(i)
			}
			rows = append(rows, row)
		}
	}
	if err := rdr.Err(); err != nil {
		return nil, nil, err
	}
	// Through JSON, so that numbers compare as `skippr query --json` decodes them.
	b, err := json.Marshal(rows)
	if err != nil {
		return nil, nil, err
	}
	var out []any
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, nil, err
	}
	return out, rdr.Schema(), nil
}

// writeSelfSigned writes a self-signed certificate for localhost and its key.
func writeSelfSigned(t *testing.T, certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{"localhost"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// writeClientCert writes a CA (caFile) and a client certificate for cn that it signed (certFile, keyFile):
// what --tls-client-ca trusts and what a client presents.
func writeClientCert(t *testing.T, dir, cn string) (caFile, certFile, keyFile string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(10), Subject: pkix.Name{CommonName: "clients CA"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(11), Subject: pkix.Name{CommonName: cn},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		NotBefore:   time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caTmpl, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	caFile, certFile, keyFile = filepath.Join(dir, "clients-ca.pem"), filepath.Join(dir, cn+".pem"), filepath.Join(dir, cn+".key")
	for f, b := range map[string]*pem.Block{caFile: {Type: "CERTIFICATE", Bytes: caDER}, certFile: {Type: "CERTIFICATE", Bytes: der}, keyFile: {Type: "EC PRIVATE KEY", Bytes: kb}} {
		if err := os.WriteFile(f, pem.EncodeToMemory(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return caFile, certFile, keyFile
}

// cpuTicks is the user+system CPU time of a process, in clock ticks.
func cpuTicks(t *testing.T, pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatalf("process %d: %v", pid, err)
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return u + s
}

// TestServeFlightSQL runs datagen → Iceberg with the last rows only in the WAL (apply paused) and queries it
// through `skippr serve` with the arrow-go Flight SQL client: answers equal `skippr query`'s row by row, for
// statements and prepared statements, and include the WAL's rows, also rows committed after the server
// started (and leave them out with the as-of-lake comment, as skippr query --as-of-lake); the catalog calls list the lake table with its schema; clients without a known token are refused;
// writes and file access are refused; a statement over the time limit ends with DEADLINE_EXCEEDED; a cancelled
// statement stops the query engine's work.
func TestServeFlightSQL(t *testing.T) {
	e := harness.NewEnvWith(t, "datagen", "iceberg", "duckdb")
	lakeSettings := fmt.Sprintf(`{"catalog": {"warehouse": %q}, "namespace": "lake"}`, filepath.Join(e.Dir, "lake"))
	config := func(rows int, paused bool) {
		e.WriteConfig(fmt.Sprintf(`connections:
  gen:
    plugin: datagen
    version: "~> 0.1"
    settings: { seed: 3, rows: %d, batch_size: 300, update_ratio: 0.2, delete_ratio: 0.1 }
  lake:
    plugin: iceberg
    version: "~> 0.1"
    settings: %s
pipelines:
  orders:
    source: gen
    destinations: [lake]
    apply: { paused: %v }
    wal:
      url: file://%s
      group_commit: { max_bytes: 64KiB, max_delay: 50ms }
`, rows, lakeSettings, paused, filepath.Join(e.Dir, "wal")))
	}
	config(2000, false)
	e.MustRun("sync", "--once") // the lake holds the first 2000 events
	config(2600, true)
	e.MustRun("sync", "--once") // 600 more, only in the WAL

	const nbToken, biToken = "nb-0123456789abcdef0123", "bi-fedcba9876543210fedc"
	e.ExtraEnv = append(e.ExtraEnv, "NB_TOKEN="+nbToken, "BI_TOKEN="+biToken)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	const limit = 20 * time.Second
	serve := startServe(t, ctx, e, "--log-level", "debug", "--query-timeout", limit.String(),
		"--token", "notebook=NB_TOKEN", "--token", "bi=BI_TOKEN")
	addr, stderr := serve.Addr, serve.Stderr
	cl, err := flightsql.NewClient(addr, nil, nil, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	as := func(ctx context.Context, token string) context.Context {
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	nb := as(ctx, nbToken)

	// Answers: the same as skippr query's, row by row, with the WAL's rows in them.
	queries := []string{
		`SELECT id, seq, name, amount, ts::VARCHAR AS ts FROM events ORDER BY id`,
		`SELECT count(*) AS n, sum(seq)::BIGINT AS s, min(name) AS first, max(amount) AS top FROM events`,
		`SELECT name[1:1] AS letter, count(*) AS n FROM lake.events GROUP BY 1 ORDER BY 1`,
		`SELECT id, name FROM events WHERE false`,
	}
	for _, q := range queries {
		want := e.QueryJSON(q, false)
		for _, prepared := range []bool{false, true} {
			got, _, err := flightRows(nb, cl, q, prepared)
			if err != nil {
				t.Fatalf("%s (prepared %v): %v\n%s", q, prepared, err, stderr.String())
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s (prepared %v)\nFlight SQL: %s\nskippr query: %s", q, prepared, harness.Show(got), harness.Show(want))
			}
		}
	}
	// Each statement's log line at debug says where its time went outside the engine, and a statement after
	// the first sent the engine no WAL entry again (it keeps them).
	if m := regexp.MustCompile(`msg="query done" .*rows=\d+ time=\S+ wal=\S+ plan=\S+ send=\S+ entries_sent=0 stream_bytes=\d+ engine_first_byte=\S+ engine=\S+ attempts=1`).FindString(stderr.String()); m == "" {
		t.Fatalf("no statement's debug line with its timings and no WAL entry sent again:\n%s", stderr.String())
	}
	// The same answers through the ADBC Flight SQL driver behind database/sql, with a bound parameter too.
	adbc, err := adbcDB(addr, nbToken)
	if err != nil {
		t.Fatal(err)
	}
	defer adbc.Close()
	for _, q := range queries {
		got, err := adbcRows(ctx, adbc, q)
		if err != nil {
			t.Fatalf("ADBC: %s: %v\n%s", q, err, stderr.String())
		}
		if want := e.QueryJSON(q, false); !reflect.DeepEqual(got, want) {
			t.Fatalf("%s\nADBC: %s\nskippr query: %s", q, harness.Show(got), harness.Show(want))
		}
	}
	got, err := adbcRows(ctx, adbc, `SELECT id, name FROM events WHERE id < ? ORDER BY id`, int64(40))
	if want := e.QueryJSON(`SELECT id, name FROM events WHERE id < 40 ORDER BY id`, false); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("ADBC with a parameter: %v\n%s\nskippr query: %s", err, harness.Show(got), harness.Show(want))
	}
	if bad, err := adbcDB(addr, "not-a-known-token-at-all"); err != nil {
		t.Fatal(err)
	} else if _, err := adbcRows(ctx, bad, `SELECT 1`); err == nil {
		t.Fatal("ADBC with an unknown token was answered")
	} else {
		bad.Close()
	}
	// For the record (no bound: the machine is shared): a point lookup over Flight SQL against a running
	// server, beside the same lookup through the one-shot skippr query, which starts its plugins each time.
	const lookup = `SELECT * FROM events WHERE id = 42`
	var flightTimes []time.Duration
	for i := 0; i < 7; i++ {
		start := time.Now()
		if _, _, err := flightRows(nb, cl, lookup, false); err != nil {
			t.Fatal(err)
		}
		flightTimes = append(flightTimes, time.Since(start))
	}
	start := time.Now()
	e.MustRun("query", "--json", lookup)
	slices.Sort(flightTimes)
	t.Logf("point lookup: Flight SQL median %s (of 7), skippr query %s", flightTimes[3].Round(time.Millisecond), time.Since(start).Round(time.Millisecond))

	// Clients at once (more than --max-concurrent): each gets the whole answer.
	want := e.QueryJSON(queries[0], false)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, _, err := flightRows(nb, cl, queries[0], i%2 == 1)
			if err == nil && !reflect.DeepEqual(got, want) {
				err = fmt.Errorf("client %d got %d rows, want %d", i, len(got), len(want))
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent clients: %v", err)
		}
	}
	// Prepared statements with parameters: DuckDB binds them (placeholders ? or $1), every type round trips.
	ps, err := cl.Prepare(nb, `SELECT id, seq, name FROM events WHERE id BETWEEN ? AND ? AND name LIKE ? ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	params := func(fields []arrow.Field, build func(b *array.RecordBuilder)) arrow.RecordBatch {
		b := array.NewRecordBuilder(memory.DefaultAllocator, arrow.NewSchema(fields, nil))
		defer b.Release()
		build(b)
		return b.NewRecordBatch()
	}
	rec := params([]arrow.Field{{Name: "lo", Type: arrow.PrimitiveTypes.Int64}, {Name: "hi", Type: arrow.PrimitiveTypes.Int64}, {Name: "pat", Type: arrow.BinaryTypes.String}},
		func(b *array.RecordBuilder) {
			b.Field(0).(*array.Int64Builder).Append(10)
			b.Field(1).(*array.Int64Builder).Append(400)
			b.Field(2).(*array.StringBuilder).Append("%a%")
		})
	ps.SetParameters(rec)
	info, err := ps.Execute(nb)
	if err != nil {
		t.Fatal(err)
	}
	got, _, err = readFlight(nb, cl, info)
	if want := e.QueryJSON(`SELECT id, seq, name FROM events WHERE id BETWEEN 10 AND 400 AND name LIKE '%a%' ORDER BY id`, false); err != nil || len(got) == 0 || !reflect.DeepEqual(got, want) {
		t.Fatalf("prepared with parameters: %v\nFlight SQL: %s\nskippr query: %s", err, harness.Show(got), harness.Show(want))
	}
	ps.Close(nb)
	ps, err = cl.Prepare(nb, `SELECT $1 AS b, $2 AS i, $3 AS f, $4 AS s, $5 AS bin, $6 AS d, $7 AS ts, $8 AS dec, $9 AS n`)
	if err != nil {
		t.Fatal(err)
	}
	tsType := &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}
	decType := &arrow.Decimal128Type{Precision: 12, Scale: 2}
	rec = params([]arrow.Field{{Name: "b", Type: arrow.FixedWidthTypes.Boolean}, {Name: "i", Type: arrow.PrimitiveTypes.Int32},
		{Name: "f", Type: arrow.PrimitiveTypes.Float64}, {Name: "s", Type: arrow.BinaryTypes.String}, {Name: "bin", Type: arrow.BinaryTypes.Binary},
		{Name: "d", Type: arrow.FixedWidthTypes.Date32}, {Name: "ts", Type: tsType}, {Name: "dec", Type: decType},
		{Name: "n", Type: arrow.BinaryTypes.String, Nullable: true}},
		func(b *array.RecordBuilder) {
			b.Field(0).(*array.BooleanBuilder).Append(true)
			b.Field(1).(*array.Int32Builder).Append(-7)
			b.Field(2).(*array.Float64Builder).Append(0.1)
			b.Field(3).(*array.StringBuilder).Append("it's \\x; DROP")
			b.Field(4).(*array.BinaryBuilder).Append([]byte{0, '\'', 0xff})
			b.Field(5).(*array.Date32Builder).Append(arrow.Date32FromTime(time.Date(1999, 12, 31, 0, 0, 0, 0, time.UTC)))
			b.Field(6).(*array.TimestampBuilder).Append(arrow.Timestamp(time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC).UnixMicro()))
			b.Field(7).(*array.Decimal128Builder).Append(decimal128.FromI64(-12345))
			b.Field(8).AppendNull()
		})
	ps.SetParameters(rec)
	info, err = ps.Execute(nb)
	if err != nil {
		t.Fatal(err)
	}
	rdr, err := cl.DoGet(nb, info.Endpoint[0].Ticket)
	if err != nil {
		t.Fatal(err)
	}
	if !rdr.Next() {
		t.Fatalf("typed parameters: no row: %v", rdr.Err())
	}
	back := rdr.RecordBatch()
	for c := 0; c < int(rec.NumCols()); c++ {
		if got, want := back.Column(c).ValueStr(0), rec.Column(c).ValueStr(0); got != want {
			t.Errorf("parameter %s: %q came back as %q (%s)", rec.ColumnName(c), want, got, back.Column(c).DataType())
		}
	}
	rdr.Release()
	ps.Close(nb)
	if t.Failed() {
		t.FailNow()
	}

	count := func(ctx context.Context) any {
		t.Helper()
		got, _, err := flightRows(ctx, cl, `SELECT count(*) AS n FROM events`, false)
		if err != nil {
			t.Fatal(err)
		}
		return got[0].(map[string]any)["n"]
	}
	if lakeOnly := e.QueryJSON(`SELECT count(*) AS n FROM events`, true)[0].(map[string]any)["n"]; lakeOnly == count(nb) {
		t.Fatalf("the answer has as many rows as the lake alone (%v): the WAL's rows are missing", lakeOnly)
	}
	// The as-of-lake comment: the lake alone, as skippr query --as-of-lake answers, plain and prepared.
	lakeWant := e.QueryJSON(queries[0], true)
	if reflect.DeepEqual(lakeWant, e.QueryJSON(queries[0], false)) {
		t.Fatal("the lake alone answers as the lake with the WAL: the test has no unapplied rows")
	}
	for _, prepared := range []bool{false, true} {
		got, _, err := flightRows(nb, cl, "/* skippr: as_of_lake */\n"+queries[0], prepared)
		if err != nil || !reflect.DeepEqual(got, lakeWant) {
			t.Fatalf("as-of-lake (prepared %v): %v: %d rows, skippr query --as-of-lake %d", prepared, err, len(got), len(lakeWant))
		}
	}
	// Rows committed to the WAL while the server runs are in the next statement.
	before := count(nb)
	config(3000, true)
	e.MustRun("sync", "--once")
	after, queried := count(nb), e.QueryJSON(`SELECT count(*) AS n FROM events`, false)[0].(map[string]any)["n"]
	if after != queried || after == before {
		t.Fatalf("after 400 more events in the WAL: Flight SQL counts %v (before: %v), skippr query %v", after, before, queried)
	}
	// The pipeline applies what the WAL held and reclaims it while the server keeps its plans and its engine's
	// WAL rows: the next statement reads the new snapshot, with no row counted twice or lost, and answers as
	// skippr query does.
	full := e.QueryJSON(queries[0], false)
	config(3000, false)
	e.MustRun("sync", "--once")
	if lake := e.QueryJSON(`SELECT count(*) AS n FROM events`, true)[0].(map[string]any)["n"]; lake != after {
		t.Fatalf("after the apply the lake alone counts %v, want %v: the test applied nothing", lake, after)
	}
	if got := count(nb); got != after {
		t.Fatalf("after the apply Flight SQL counts %v, want %v", got, after)
	}
	if got, _, err := flightRows(nb, cl, queries[0], false); err != nil || !reflect.DeepEqual(got, full) {
		t.Fatalf("after the apply: %v: %d rows, before it %d", err, len(got), len(full))
	}

	// The catalog: one table, lake.events, with its Arrow schema; SqlInfo says read-only.
	info, err = cl.GetTables(nb, &flightsql.GetTablesOpts{IncludeSchema: true})
	if err != nil {
		t.Fatal(err)
	}
	rdr, err = cl.DoGet(nb, info.Endpoint[0].Ticket)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rdr.Next() {
		rec := rdr.RecordBatch()
		for i := 0; i < int(rec.NumRows()); i++ {
			sc, err := flight.DeserializeSchema(rec.Column(4).(*array.Binary).Value(i), nil)
			if err != nil {
				t.Fatal(err)
			}
			var cols []string
			for _, f := range sc.Fields() {
				cols = append(cols, f.Name)
			}
			tables = append(tables, fmt.Sprintf("%s.%s.%s %s: %s", rec.Column(0).ValueStr(i), rec.Column(1).ValueStr(i),
				rec.Column(2).ValueStr(i), rec.Column(3).ValueStr(i), strings.Join(cols, ",")))
		}
	}
	if err := rdr.Err(); err != nil {
		t.Fatal(err)
	}
	rdr.Release()
	if want := []string{"memory.lake.events TABLE: id,seq,name,amount,ts"}; !reflect.DeepEqual(tables, want) {
		t.Fatalf("GetTables: %q, want %q", tables, want)
	}
	for name, call := range map[string]func() (*flight.FlightInfo, error){
		"GetDbSchemas": func() (*flight.FlightInfo, error) { return cl.GetDBSchemas(nb, &flightsql.GetDBSchemasOpts{}) },
		"GetCatalogs":  func() (*flight.FlightInfo, error) { return cl.GetCatalogs(nb) },
		"GetSqlInfo": func() (*flight.FlightInfo, error) {
			return cl.GetSqlInfo(nb, []flightsql.SqlInfo{flightsql.SqlInfoFlightSqlServerName, flightsql.SqlInfoFlightSqlServerReadOnly})
		},
	} {
		info, err := call()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		rdr, err := cl.DoGet(nb, info.Endpoint[0].Ticket)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var got []string
		for rdr.Next() {
			rec := rdr.RecordBatch()
			for i := 0; i < int(rec.NumRows()); i++ {
				var cells []string
				for c := 0; c < int(rec.NumCols()); c++ {
					cells = append(cells, rec.Column(c).ValueStr(i))
				}
				got = append(got, strings.Join(cells, " "))
			}
		}
		rdr.Release()
		want := map[string]string{"GetDbSchemas": "memory lake", "GetCatalogs": "memory", "GetSqlInfo": `0 [0,"skippr"]|3 [1,true]`}[name]
		if strings.Join(got, "|") != want {
			t.Fatalf("%s: %q, want %q", name, strings.Join(got, "|"), want)
		}
	}

	// Authentication: no token, a wrong one, and a token in the wrong header are refused; the other client's
	// token works; the log names clients and never holds a token.
	for name, c := range map[string]context.Context{
		"no token":    ctx,
		"wrong token": as(ctx, nbToken+"x"),
		"a prefix":    as(ctx, nbToken[:10]),
		"not bearer":  metadata.AppendToOutgoingContext(ctx, "authorization", "Basic "+nbToken),
	} {
		if _, err := cl.Execute(c, `SELECT 1`); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("%s: %v, want Unauthenticated", name, err)
		}
		if _, err := cl.GetTables(c, &flightsql.GetTablesOpts{}); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("%s, GetTables: %v, want Unauthenticated", name, err)
		}
	}
	if got := count(as(ctx, biToken)); got != count(nb) {
		t.Fatalf("the second client counts %v", got)
	}

	// Read-only: updates are refused by the server, SQL that reaches outside by the query engine.
	if _, err := cl.ExecuteUpdate(nb, `DELETE FROM events`); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("update: %v, want PermissionDenied", err)
	}
	secret := filepath.Join(e.Dir, "secret.csv")
	if err := os.WriteFile(secret, []byte("password\nhunter2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	written := filepath.Join(e.Dir, "written.csv")
	for _, q := range []string{
		"COPY (SELECT * FROM events) TO '" + written + "'",
		"ATTACH '" + filepath.Join(e.Dir, "x.duckdb") + "' AS x",
		"INSTALL httpfs",
		"SELECT * FROM read_csv('" + secret + "')",
		"SELECT * FROM read_text('" + filepath.Join(e.Dir, "skippr.yml") + "')",
		"SET enable_external_access = true",
	} {
		rows, _, err := flightRows(nb, cl, q, false)
		if err == nil {
			t.Fatalf("%s: accepted, answered %s", q, harness.Show(rows))
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Fatalf("%s: %v", q, err)
		}
	}
	for _, f := range []string{written, filepath.Join(e.Dir, "x.duckdb")} {
		if _, err := os.Stat(f); err == nil {
			t.Fatalf("%s was written through skippr serve", f)
		}
	}

	// A statement over the limit ends with DEADLINE_EXCEEDED naming the limit.
	const slow = `SELECT sum(hash(range)) AS h FROM range(100000000000000)`
	start = time.Now()
	_, _, err = flightRows(nb, cl, slow, false)
	if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "--query-timeout") {
		t.Fatalf("slow statement: %v after %s, want DEADLINE_EXCEEDED naming --query-timeout", err, time.Since(start))
	}
	if d := time.Since(start); d < limit || d > limit+50*time.Second {
		t.Fatalf("the slow statement ended after %s, limit %s", d, limit)
	}

	// A client that cancels stops the engine's work: the duckdb plugin's CPU time stops growing.
	duck := harness.ChildByName(serve.Cmd.Process.Pid, "duckdb")
	if duck == 0 {
		t.Fatalf("no duckdb plugin under skippr serve (pid %d)", serve.Cmd.Process.Pid)
	}
	cctx, stop := context.WithCancel(nb)
	started := time.Now()
	failed := make(chan error, 1)
	go func() { _, _, err := flightRows(cctx, cl, slow, false); failed <- err }()
	busy := cpuTicks(t, duck)
	harness.WaitFor(t, 60*time.Second, func() bool { return cpuTicks(t, duck) > busy+50 }) // half a CPU-second into it
	stop()
	if err := <-failed; status.Code(err) != codes.Canceled && !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled statement: %v", err)
	}
	harness.WaitFor(t, 30*time.Second, func() bool {
		a := cpuTicks(t, duck)
		time.Sleep(time.Second)
		return cpuTicks(t, duck)-a < 20 // under a fifth of a CPU: the query stopped
	})
	if d := time.Since(started); d > limit-2*time.Second {
		t.Fatalf("the cancelled query's work went on for %s, until about the time limit (%s): the cancel did not reach the engine", d, limit)
	}
	if got := count(nb); got == nil {
		t.Fatal("no answer after the cancel")
	}

	// Mutual TLS (without tokens): a client trusting the server's certificate and presenting one the client CA
	// signed gets the same answer; one without a client certificate, or speaking plain gRPC, gets none.
	certFile, keyFile := filepath.Join(e.Dir, "cert.pem"), filepath.Join(e.Dir, "key.pem")
	writeSelfSigned(t, certFile, keyFile)
	clientCA, clientCert, clientKey := writeClientCert(t, e.Dir, "notebook")
	tlsServe := startServe(t, ctx, e, "--tls-cert", certFile, "--tls-key", keyFile, "--tls-client-ca", clientCA, "--query-memory", "64MB")
	tlsAddr, tlsErr := tlsServe.Addr, tlsServe.Stderr
	pemBytes, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pemBytes)
	pair, err := tls.LoadX509KeyPair(clientCert, clientKey)
	if err != nil {
		t.Fatal(err)
	}
	tlsCl, err := flightsql.NewClient(tlsAddr, nil, nil, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "localhost", Certificates: []tls.Certificate{pair}})))
	if err != nil {
		t.Fatal(err)
	}
	defer tlsCl.Close()
	noCert, err := flightsql.NewClient(tlsAddr, nil, nil, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "localhost"})))
	if err != nil {
		t.Fatal(err)
	}
	defer noCert.Close()
	if _, err := noCert.Execute(ctx, `SELECT 1`); err == nil {
		t.Fatal("a TLS client without a client certificate was answered by the mutual-TLS server")
	}
	got, _, err = flightRows(ctx, tlsCl, `SELECT count(*) AS n FROM events`, false)
	if err != nil || got[0].(map[string]any)["n"] != count(nb) {
		t.Fatalf("over TLS: %s %v\n%s", harness.Show(got), err, tlsErr.String())
	}
	// This server allows a statement 64MB: one that cannot spill past it ends with RESOURCE_EXHAUSTED.
	if _, _, err := flightRows(ctx, tlsCl, `SELECT len(list(range)) AS n FROM range(40000000)`, false); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--query-memory 64MB") {
		t.Fatalf("a statement over the memory limit: %v, want RESOURCE_EXHAUSTED naming --query-memory", err)
	}
	plain, err := flightsql.NewClient(tlsAddr, nil, nil, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := plain.Execute(ctx, `SELECT 1`); err == nil {
		t.Fatal("a plain-text client was answered by the TLS server")
	}

	log := stderr.String()
	for _, tok := range []string{nbToken, biToken} {
		if strings.Contains(log, tok) {
			t.Fatalf("the log holds a token:\n%s", log)
		}
	}
	if !strings.Contains(log, "client=notebook") || !strings.Contains(log, "client=bi") {
		t.Fatalf("the log does not name the clients:\n%s", log)
	}
}
