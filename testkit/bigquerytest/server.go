// Package bigquerytest is a STAND-IN FOR GOOGLE BIGQUERY, a cloud service that cannot run here: an HTTP
// server on 127.0.0.1 that speaks the parts of BigQuery's REST API (datasets, tables get/insert/patch/delete and
// testIamPermissions, query jobs insert/get/getQueryResults) and of the Storage Write gRPC service
// (CreateWriteStream, GetWriteStream, AppendRows, FinalizeWriteStream, BatchCommitWriteStreams) that
// cloud.google.com/go/bigquery uses for the skippr BigQuery plugin, both on one port (gRPC over h2c).
//
// It stores tables in a real SQL engine, a PostgreSQL 15 database (testkit/pgtest): a dataset is a schema, a
// table a table; STRUCT and ARRAY columns are jsonb. Query jobs are parsed against grammar.go — the GoogleSQL
// statement shapes the plugin is allowed to emit, written down from BigQuery's reference — and anything else is
// refused as BigQuery would refuse a syntax error; what passes is translated and run, a script inside one
// PostgreSQL transaction. Pending write streams hold their rows until BatchCommitWriteStreams inserts them all
// in one transaction; appends check offsets (ALREADY_EXISTS behind, OUT_OF_RANGE ahead) and the writer's proto
// descriptor against the table's column types.
//
// What it does not model: costs, quotas, eventual consistency of metadata, slots, partitions, expiration (a
// staging table left behind stays), and any statement outside grammar.go. Passing against it proves the
// plugin's logic and its statements' shapes; the live suite (SKIPPR_BIGQUERY_*) proves them against BigQuery.
package bigquerytest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/bigquery/storage/apiv1/storagepb"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/h2c"
	bq "google.golang.org/api/bigquery/v2"
	"google.golang.org/grpc"

	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// Server is a running stand-in.
type Server struct {
	// URL is the base address to give the plugin as its endpoint setting.
	URL     string
	Project string
	DB      *pgtest.DB // the database Start made; nil after Serve
	pool    *pgxpool.Pool
	http    *http.Server
	stop    func()

	mu       sync.Mutex
	datasets map[string]*bq.Dataset
	tables   map[string]*tableMeta // by dataset.table
	jobs     map[string]*job
	streams  map[string]*writeStream
	denied   map[string]bool
	queries  []string
	// txMu serialises commits of pending streams.
	txMu sync.Mutex
	// mutating holds the tables a running transaction mutates: another transaction that mutates one of them
	// is cancelled, as BigQuery documents (see busy).
	mutating map[string]string
	// created counts CreateWriteStream calls per hour (Unix hour), refused past streamQuota.
	created     map[int64]int
	streamQuota int
}

// WriteStreamQuota is BigQuery's CreateWriteStream quota: "CreateWriteStream requests: 10,000 streams every
// hour, per project per region. You can call CreateWriteStream up to 10,000 times per hour per project per
// region. Consider using the default stream if you don't need exactly-once semantics." (BigQuery, "Quotas and
// limits", Storage Write API). The stand-in counts per clock hour and refuses past it.
const WriteStreamQuota = 10000

// MaxAppendRequest is the largest AppendRows request the stand-in takes: "AppendRows request size: 10 MB"
// (BigQuery, "Quotas and limits", Storage Write API). Larger ones are refused with ResourceExhausted.
const MaxAppendRequest = 10_000_000

// MaxTransactionTables: "A transaction can mutate data in at most 100 tables and can perform at most 100,000
// partition modifications." (BigQuery, "Multi-statement transactions", Limitations.)
const MaxTransactionTables = 100

// SetWriteStreamQuota lowers the CreateWriteStream quota, so a test can reach it with few applies.
func (s *Server) SetWriteStreamQuota(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.streamQuota = n
}

// WriteStreamsCreated is the number of CreateWriteStream calls served this hour.
func (s *Server) WriteStreamsCreated() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.created[time.Now().Unix()/3600]
}

// Mutate marks dataset.table as mutated by a transaction that runs until release is called, as another
// pipeline's transaction would: "If a transaction mutates (update or deletes) rows in a table, then other
// transactions or DML statements that mutate rows in the same table cannot run concurrently. Conflicting
// transactions are cancelled." (BigQuery, "Multi-statement transactions", Transaction concurrency.)
func (s *Server) Mutate(dataset, table string) (release func()) {
	key := dataset + "." + table
	s.mu.Lock()
	s.mutating[key] = "test"
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(s.mutating, key)
		s.mu.Unlock()
	}
}

type tableMeta struct {
	t     *bq.Table
	etag  int
	cols  []*bq.TableFieldSchema
	pgKey []string
}

// Start runs a stand-in for project on a new database of the shared Postgres server until the test ends.
func Start(t testing.TB, project string) *Server {
	t.Helper()
	db := pgtest.NewDB(t)
	s, err := Serve(context.Background(), project, db.ConnString())
	if err != nil {
		t.Fatal(err)
	}
	s.DB = db
	t.Cleanup(s.Close)
	return s
}

// Serve runs a stand-in for project on the PostgreSQL database at connString until Close: for programs
// outside tests (the benchmarks), which have a server of their own.
func Serve(ctx context.Context, project, connString string) (*Server, error) {
	pool, err := pgxpool.New(ctx, connString)
	if err != nil {
		return nil, fmt.Errorf("stand-in: connect to PostgreSQL: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		pool.Close()
		return nil, err
	}
	s := &Server{URL: "http://" + ln.Addr().String(), Project: project, pool: pool,
		datasets: map[string]*bq.Dataset{}, tables: map[string]*tableMeta{}, jobs: map[string]*job{},
		streams: map[string]*writeStream{}, denied: map[string]bool{}, mutating: map[string]string{}, created: map[int64]int{},
		streamQuota: WriteStreamQuota}
	// gRPC's default receive limit is 4 MiB; BigQuery takes AppendRows requests up to its documented limit.
	g := grpc.NewServer(grpc.MaxRecvMsgSize(MaxAppendRequest))
	storagepb.RegisterBigQueryWriteServer(g, &writeService{s: s})
	rest := http.HandlerFunc(s.serveREST)
	s.http = &http.Server{Handler: h2c.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			g.ServeHTTP(w, r)
			return
		}
		rest.ServeHTTP(w, r)
	}), &http2.Server{})}
	go s.http.Serve(ln)
	s.stop = func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.http.Shutdown(ctx)
		g.Stop()
		pool.Close()
	}
	return s, nil
}

// Close stops the stand-in; the database stays.
func (s *Server) Close() { s.stop() }

// Deny makes testIamPermissions report these permissions as missing, as for credentials without them.
func (s *Server) Deny(perms ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range perms {
		s.denied[p] = true
	}
}

// Queries returns the query jobs' texts so far.
func (s *Server) Queries() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.queries...)
}

// Pool is the stand-in's database, for tests that compare tables.
func (s *Server) Pool() *pgxpool.Pool { return s.pool }

// Tables lists dataset.table names the stand-in holds.
func (s *Server) Tables() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for k := range s.tables {
		out = append(out, k)
	}
	return out
}

// apiError is BigQuery's REST error body.
type apiError struct {
	Code    int
	Reason  string
	Message string
}

func (e *apiError) Error() string { return e.Message }

func errf(code int, reason, format string, args ...any) error {
	return &apiError{Code: code, Reason: reason, Message: fmt.Sprintf(format, args...)}
}

func writeErr(w http.ResponseWriter, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		ae = &apiError{Code: 400, Reason: "invalidQuery", Message: err.Error()}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(ae.Code)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
		"code": ae.Code, "message": ae.Message,
		"errors": []map[string]string{{"reason": ae.Reason, "message": ae.Message, "domain": "global"}},
	}})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

func (s *Server) serveREST(w http.ResponseWriter, r *http.Request) {
	path, ok := strings.CutPrefix(r.URL.Path, "/bigquery/v2/projects/")
	if !ok {
		writeErr(w, errf(404, "notFound", "no such API: %s", r.URL.Path))
		return
	}
	parts := strings.Split(path, "/")
	if parts[0] != s.Project {
		writeErr(w, errf(404, "notFound", "Not found: Project %s", parts[0]))
		return
	}
	// BigQuery carries out a request it has received whether or not the client stays for the answer: a client
	// killed while its tables.insert runs finds the table there when it comes back. The request's context
	// would instead cut the PostgreSQL statement short on disconnect — or not, when it had already committed —
	// and leave the stand-in's tables unrecorded beside PostgreSQL's (test/chaos: a restarted sync's create
	// then failed on "relation already exists").
	ctx := context.WithoutCancel(r.Context())
	var (
		out any
		err error
	)
	switch {
	case len(parts) == 2 && parts[1] == "datasets" && r.Method == http.MethodPost:
		var d bq.Dataset
		if err = json.NewDecoder(r.Body).Decode(&d); err == nil {
			out, err = s.createDataset(ctx, &d)
		}
	case len(parts) == 3 && parts[1] == "datasets" && r.Method == http.MethodGet:
		out, err = s.getDataset(parts[2])
	case len(parts) == 4 && parts[1] == "datasets" && parts[3] == "tables" && r.Method == http.MethodPost:
		var t bq.Table
		if err = json.NewDecoder(r.Body).Decode(&t); err == nil {
			out, err = s.createTable(ctx, parts[2], &t)
		}
	case len(parts) == 5 && parts[1] == "datasets" && parts[3] == "tables" && strings.HasSuffix(parts[4], ":testIamPermissions"):
		var req bq.TestIamPermissionsRequest
		if err = json.NewDecoder(r.Body).Decode(&req); err == nil {
			out, err = s.testPermissions(parts[2], strings.TrimSuffix(parts[4], ":testIamPermissions"), req.Permissions)
		}
	case len(parts) == 5 && parts[1] == "datasets" && parts[3] == "tables":
		switch r.Method {
		case http.MethodGet:
			out, err = s.getTable(parts[2], parts[4])
		case http.MethodPatch, http.MethodPut:
			var t bq.Table
			if err = json.NewDecoder(r.Body).Decode(&t); err == nil {
				out, err = s.patchTable(ctx, parts[2], parts[4], &t, r.Header.Get("If-Match"))
			}
		case http.MethodDelete:
			err = s.deleteTable(ctx, parts[2], parts[4])
			if err == nil {
				w.WriteHeader(http.StatusNoContent)
				return
			}
		default:
			err = errf(405, "invalid", "method %s", r.Method)
		}
	case len(parts) == 2 && parts[1] == "jobs" && r.Method == http.MethodPost:
		var j bq.Job
		if err = json.NewDecoder(r.Body).Decode(&j); err == nil {
			out, err = s.insertJob(ctx, &j)
		}
	case len(parts) == 3 && parts[1] == "jobs" && r.Method == http.MethodGet:
		out, err = s.getJob(parts[2])
	case len(parts) == 3 && parts[1] == "queries" && r.Method == http.MethodGet:
		out, err = s.queryResults(parts[2])
	default:
		err = errf(404, "notFound", "the stand-in does not serve %s %s", r.Method, r.URL.Path)
	}
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, out)
}

func (s *Server) createDataset(ctx context.Context, d *bq.Dataset) (*bq.Dataset, error) {
	if d.DatasetReference == nil || d.DatasetReference.DatasetId == "" {
		return nil, errf(400, "invalid", "datasetReference.datasetId is required")
	}
	id := d.DatasetReference.DatasetId
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.datasets[id]; ok {
		return nil, errf(409, "duplicate", "Already Exists: Dataset %s:%s", s.Project, id)
	}
	if _, err := s.pool.Exec(ctx, "CREATE SCHEMA "+pgIdent(id)); err != nil {
		if pgCode(err) == "42P06" /* duplicate_schema */ {
			return nil, errf(409, "duplicate", "Already Exists: Dataset %s:%s", s.Project, id)
		}
		return nil, fmt.Errorf("create schema: %w", err)
	}
	d.DatasetReference.ProjectId = s.Project
	d.Id = s.Project + ":" + id
	if d.Location == "" {
		d.Location = "US"
	}
	s.datasets[id] = d
	return d, nil
}

func (s *Server) getDataset(id string) (*bq.Dataset, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.datasets[id]
	if !ok {
		return nil, errf(404, "notFound", "Not found: Dataset %s:%s", s.Project, id)
	}
	return d, nil
}

// pgType is the PostgreSQL type that holds a BigQuery column.
func pgType(f *bq.TableFieldSchema) (string, error) {
	if f.Mode == "REPEATED" {
		return "jsonb", nil
	}
	switch canonical(f.Type) {
	case "INT64":
		return "bigint", nil
	case "FLOAT64":
		return "double precision", nil
	case "BOOL":
		return "boolean", nil
	case "STRING":
		return "text", nil
	case "BYTES":
		return "bytea", nil
	case "NUMERIC":
		return "numeric(38,9)", nil
	case "BIGNUMERIC":
		return "numeric", nil
	case "DATE":
		return "date", nil
	case "TIME":
		return "time", nil
	case "DATETIME":
		return "timestamp", nil
	case "TIMESTAMP":
		return "timestamptz", nil
	case "JSON", "STRUCT":
		return "jsonb", nil
	}
	return "", errf(400, "invalid", "the stand-in has no column type %s", f.Type)
}

func canonical(t string) string {
	switch strings.ToUpper(t) {
	case "INTEGER":
		return "INT64"
	case "FLOAT":
		return "FLOAT64"
	case "BOOLEAN":
		return "BOOL"
	case "RECORD":
		return "STRUCT"
	}
	return strings.ToUpper(t)
}

// legacy renames types to the names the REST API answers with (INTEGER, FLOAT, BOOLEAN, RECORD), as BigQuery
// does whatever name a table was created with.
func legacy(fields []*bq.TableFieldSchema) {
	for _, f := range fields {
		switch canonical(f.Type) {
		case "INT64":
			f.Type = "INTEGER"
		case "FLOAT64":
			f.Type = "FLOAT"
		case "BOOL":
			f.Type = "BOOLEAN"
		case "STRUCT":
			f.Type = "RECORD"
		default:
			f.Type = canonical(f.Type)
		}
		if f.Mode == "" {
			f.Mode = "NULLABLE"
		}
		legacy(f.Fields)
	}
}

func (s *Server) createTable(ctx context.Context, dataset string, t *bq.Table) (*bq.Table, error) {
	if t.TableReference == nil || t.TableReference.TableId == "" {
		return nil, errf(400, "invalid", "tableReference.tableId is required")
	}
	if t.Schema == nil || len(t.Schema.Fields) == 0 {
		return nil, errf(400, "invalid", "the plugin creates tables with a schema")
	}
	legacy(t.Schema.Fields)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.datasets[dataset]; !ok {
		return nil, errf(404, "notFound", "Not found: Dataset %s:%s", s.Project, dataset)
	}
	key := dataset + "." + t.TableReference.TableId
	if _, ok := s.tables[key]; ok {
		return nil, errf(409, "duplicate", "Already Exists: Table %s:%s", s.Project, key)
	}
	var defs []string
	seen := map[string]bool{}
	for _, f := range t.Schema.Fields {
		if seen[strings.ToLower(f.Name)] {
			return nil, errf(400, "invalid", "Field %s already exists in schema", f.Name)
		}
		seen[strings.ToLower(f.Name)] = true
		if err := checkColumnName(f.Name); err != nil {
			return nil, err
		}
		pt, err := pgType(f)
		if err != nil {
			return nil, err
		}
		def := pgIdent(f.Name) + " " + pt
		if f.Mode == "REQUIRED" {
			def += " NOT NULL"
		}
		defs = append(defs, def)
	}
	var pk []string
	if t.TableConstraints != nil && t.TableConstraints.PrimaryKey != nil {
		pk = t.TableConstraints.PrimaryKey.Columns
		// BigQuery does not enforce it; the stand-in does, so a duplicated key fails the test that made it.
		defs = append(defs, "PRIMARY KEY ("+quoteAll(pk)+")")
	}
	if _, err := s.pool.Exec(ctx, "CREATE TABLE "+pgIdent(dataset)+"."+pgIdent(t.TableReference.TableId)+" ("+strings.Join(defs, ", ")+")"); err != nil {
		if pgCode(err) == "42P07" /* duplicate_table */ {
			// What BigQuery answers for a table that exists; the table is PostgreSQL's though the stand-in
			// holds no metadata of it (made behind its back).
			return nil, errf(409, "duplicate", "Already Exists: Table %s:%s", s.Project, key)
		}
		return nil, errf(400, "invalid", "create table: %v", err)
	}
	t.TableReference.ProjectId, t.TableReference.DatasetId = s.Project, dataset
	t.Id = s.Project + ":" + key
	t.Type = "TABLE"
	m := &tableMeta{t: t, etag: 1, cols: t.Schema.Fields, pgKey: pk}
	t.Etag = fmt.Sprint(m.etag)
	s.tables[key] = m
	return t, nil
}

func (s *Server) getTable(dataset, table string) (*bq.Table, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.tables[dataset+"."+table]
	if !ok {
		return nil, errf(404, "notFound", "Not found: Table %s:%s.%s", s.Project, dataset, table)
	}
	return m.t, nil
}

// patchTable takes schema changes BigQuery takes without a rewrite: new NULLABLE (or REPEATED) columns at the
// end; anything else is refused as BigQuery refuses it.
func (s *Server) patchTable(ctx context.Context, dataset, table string, t *bq.Table, ifMatch string) (*bq.Table, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.tables[dataset+"."+table]
	if !ok {
		return nil, errf(404, "notFound", "Not found: Table %s:%s.%s", s.Project, dataset, table)
	}
	if ifMatch != "" && strings.Trim(ifMatch, `"`) != m.t.Etag {
		return nil, errf(412, "conditionNotMet", "Precondition check failed.")
	}
	if t.Schema == nil {
		return m.t, nil
	}
	legacy(t.Schema.Fields)
	old := m.cols
	if len(t.Schema.Fields) < len(old) {
		return nil, errf(400, "invalid", "Provided Schema does not match Table %s:%s.%s. Cannot drop columns", s.Project, dataset, table)
	}
	for i, f := range old {
		n := t.Schema.Fields[i]
		if !strings.EqualFold(n.Name, f.Name) || canonical(n.Type) != canonical(f.Type) || n.Mode != f.Mode {
			return nil, errf(400, "invalid", "Provided Schema does not match Table %s:%s.%s. Field %s has changed type from %s to %s", s.Project, dataset, table, f.Name, f.Type, n.Type)
		}
	}
	// One transaction: BigQuery's patch takes all its columns or none, and a half-done one would leave
	// PostgreSQL's columns beside a schema the stand-in did not record.
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("patch table: %w", err)
	}
	defer tx.Rollback(ctx)
	for _, f := range t.Schema.Fields[len(old):] {
		if f.Mode == "REQUIRED" {
			return nil, errf(400, "invalid", "Provided Schema does not match Table %s:%s.%s. Cannot add required fields to an existing schema. (field: %s)", s.Project, dataset, table, f.Name)
		}
		if err := checkColumnName(f.Name); err != nil {
			return nil, err
		}
		pt, err := pgType(f)
		if err != nil {
			return nil, err
		}
		if _, err := tx.Exec(ctx, "ALTER TABLE "+pgIdent(dataset)+"."+pgIdent(table)+" ADD COLUMN "+pgIdent(f.Name)+" "+pt); err != nil {
			return nil, errf(400, "invalid", "add column: %v", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("patch table: %w", err)
	}
	m.cols = t.Schema.Fields
	m.t.Schema = t.Schema
	m.etag++
	m.t.Etag = fmt.Sprint(m.etag)
	return m.t, nil
}

// renameColumn runs ALTER TABLE t RENAME COLUMN a TO b and renames the column in the table's schema. BigQuery
// refuses to rename some columns (DDL reference, ALTER TABLE RENAME COLUMN statement, Limitations); the
// stand-in refuses the ones the plugin's tables can have: a clustering column and a primary key column.
func (s *Server) renameColumn(ctx context.Context, conn *pgx.Conn, st Statement) error {
	t, from, to := st.Tables[0], st.Columns[0], st.Columns[1]
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.tables[t.Dataset+"."+t.Table]
	if !ok {
		return errf(404, "notFound", "Not found: Table %s:%s.%s", s.Project, t.Dataset, t.Table)
	}
	var col *bq.TableFieldSchema
	for _, f := range m.cols {
		if strings.EqualFold(f.Name, from) {
			col = f
		}
		if strings.EqualFold(f.Name, to) {
			return errf(400, "invalid", "Column already exists: %s", f.Name)
		}
	}
	if col == nil {
		return errf(400, "invalid", "Column not found: %s", from)
	}
	var keyed []string
	if m.t.Clustering != nil {
		keyed = append(keyed, m.t.Clustering.Fields...)
	}
	if c := m.t.TableConstraints; c != nil && c.PrimaryKey != nil {
		keyed = append(keyed, c.PrimaryKey.Columns...)
	}
	for _, k := range keyed {
		if strings.EqualFold(k, from) {
			return errf(400, "invalid", "Cannot rename column %s: it is a clustering or primary key column", col.Name)
		}
	}
	if err := checkColumnName(to); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, "ALTER TABLE "+pgIdent(t.Dataset)+"."+pgIdent(t.Table)+" RENAME COLUMN "+pgIdent(col.Name)+" TO "+pgIdent(to)); err != nil {
		return err
	}
	col.Name = to
	m.etag++
	m.t.Etag = fmt.Sprint(m.etag)
	return nil
}

// renameTable runs ALTER TABLE t RENAME TO n: the table keeps its schema, constraints and rows under the new
// name of the same dataset; a name taken is refused (DDL reference, ALTER TABLE RENAME TO statement).
func (s *Server) renameTable(ctx context.Context, conn *pgx.Conn, st Statement) error {
	t, to := st.Tables[0], st.Columns[0]
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.tables[t.Dataset+"."+t.Table]
	if !ok {
		return errf(404, "notFound", "Not found: Table %s:%s.%s", s.Project, t.Dataset, t.Table)
	}
	if _, taken := s.tables[t.Dataset+"."+to]; taken {
		return errf(409, "duplicate", "Already Exists: Table %s:%s.%s", s.Project, t.Dataset, to)
	}
	if _, err := conn.Exec(ctx, "ALTER TABLE "+pgIdent(t.Dataset)+"."+pgIdent(t.Table)+" RENAME TO "+pgIdent(to)); err != nil {
		return err
	}
	delete(s.tables, t.Dataset+"."+t.Table)
	if m.t.TableReference != nil {
		m.t.TableReference.TableId = to
	}
	m.t.Id = s.Project + ":" + t.Dataset + "." + to
	m.etag++
	m.t.Etag = fmt.Sprint(m.etag)
	s.tables[t.Dataset+"."+to] = m
	return nil
}

func (s *Server) deleteTable(ctx context.Context, dataset, table string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.tables[dataset+"."+table]; !ok {
		return errf(404, "notFound", "Not found: Table %s:%s.%s", s.Project, dataset, table)
	}
	if _, err := s.pool.Exec(ctx, "DROP TABLE "+pgIdent(dataset)+"."+pgIdent(table)); err != nil {
		return fmt.Errorf("drop table: %w", err)
	}
	delete(s.tables, dataset+"."+table)
	return nil
}

func (s *Server) testPermissions(dataset, table string, perms []string) (*bq.TestIamPermissionsResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.tables[dataset+"."+table]; !ok {
		return nil, errf(404, "notFound", "Not found: Table %s:%s.%s", s.Project, dataset, table)
	}
	out := &bq.TestIamPermissionsResponse{}
	for _, p := range perms {
		if !s.denied[p] {
			out.Permissions = append(out.Permissions, p)
		}
	}
	return out, nil
}

// checkColumnName refuses what BigQuery's column naming rules refuse (BigQuery, "Specify a schema", Column
// names): "Flexible column names don't support the following special characters: An exclamation mark (!) …
// A quotation mark (") … A dollar sign ($) … A left parenthesis (() … A right parenthesis ()) … An asterisk
// (*) … A comma (,) … A period (.) … A slash (/) … A semicolon (;) … A question mark (?) … An at sign (@) …
// A left square bracket ([) … A backslash (\) … A right square bracket (]) … A caret (^) … A grave accent
// (`) … A left curly bracket ({) … A right curly bracket (}) … A tilde (~)", names have at most 300
// characters, and "Column names cannot use any of the following prefixes: _PARTITION, _TABLE_, _FILE_,
// _ROW_TIMESTAMP, __ROOT__, _COLIDENTIFIER, _CHANGE_SEQUENCE_NUMBER, _CHANGE_TYPE, _CHANGE_TIMESTAMP".
// BigQuery answers tables.insert and tables.patch with 400 invalid.
func checkColumnName(name string) error {
	if name == "" || len([]rune(name)) > 300 {
		return errf(400, "invalid", "Invalid field name \"%s\". Fields must have 1 to 300 characters.", name)
	}
	if i := strings.IndexAny(name, "!\"$()*,./;?@[\\]^`{}~"); i >= 0 {
		return errf(400, "invalid", "Invalid field name \"%s\". Fields must not contain the character %q.", name, name[i])
	}
	up := strings.ToUpper(name)
	for _, p := range []string{"_PARTITION", "_TABLE_", "_FILE_", "_ROW_TIMESTAMP", "__ROOT__", "_COLIDENTIFIER", "_CHANGE_SEQUENCE_NUMBER", "_CHANGE_TYPE", "_CHANGE_TIMESTAMP"} {
		if strings.HasPrefix(up, p) {
			return errf(400, "invalid", "Invalid field name \"%s\". Field names cannot begin with the reserved prefix %s.", name, p)
		}
	}
	return nil
}

// pgCode is the SQLSTATE of a PostgreSQL error, "" for any other error.
func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

func newID(prefix string) string {
	var b [8]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}
