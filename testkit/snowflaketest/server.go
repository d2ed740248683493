// Package snowflaketest is a STAND-IN FOR THE SNOWFLAKE CLOUD SERVICE, which cannot run here: an HTTP server
// on 127.0.0.1 that speaks the part of Snowflake's REST protocol the gosnowflake driver uses for the skippr
// destination (login with password, key-pair JWT or OAuth token; query-request with bindings and JSON results;
// heartbeat, token renewal and session close; PUT to a table stage through stage info of type LOCAL_FS, which
// gosnowflake writes to a local directory itself) and executes the statements on a real SQL engine, a
// PostgreSQL 15 database (testkit/pgtest), after translating them.
//
// What it is not: a Snowflake. It accepts only the statement shapes of its allow-list (grammar.go, each written
// from Snowflake's documentation) and refuses anything else with a syntax error, so the plugin cannot come to
// depend on a statement Snowflake would reject. It keeps Snowflake's transaction rule that a DDL statement
// commits an open transaction. It stores TIME and TIMESTAMP values with microseconds (Snowflake: nanoseconds)
// and semi-structured values as jsonb. Privileges are simulated: Options.Revoked lists what the role lacks.
// Figures measured against it are not warehouse figures.
package snowflaketest

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Options configure the stand-in.
type Options struct {
	Account, User string
	// Accepted credentials: Password, PublicKey (key-pair: the JWT must be signed by its private key), OAuthToken.
	Password   string
	PublicKey  *rsa.PublicKey
	OAuthToken string

	Database, Schema, Warehouse, Role string
	// ConnString is the PostgreSQL database holding the data; the stand-in creates Schema in it.
	ConnString string
	// StageDir holds the table stages; "" makes a temporary directory.
	StageDir string
	// Revoked lists privileges the role lacks, as GRANT spells them: "USAGE ON WAREHOUSE", "USAGE ON DATABASE",
	// "USAGE ON SCHEMA", "CREATE TABLE ON SCHEMA".
	Revoked []string
}

// Server is a running stand-in.
type Server struct {
	opt    Options
	ln     net.Listener
	http   *http.Server
	meta   *pgx.Conn // the catalog connection, under metaMu
	metaMu sync.Mutex

	Host string
	Port int

	mu         sync.Mutex
	failures   []failure // errors to answer instead of running a statement (FailNext)
	sessions   map[string]*session
	statements []string
	rejected   []string
	ownStage   bool
	nextID     int64
	nextTx     int64
}

type session struct {
	mu   sync.Mutex
	id   int64
	conn *pgx.Conn
	inTx bool
	pid  uint32 // of the PostgreSQL backend
	// The open transaction's id (0: none), name and start, for SHOW TRANSACTIONS; guarded by Server.mu.
	txID      int64
	txName    string
	txStarted time.Time
}

// Start runs a stand-in until Close.
func Start(ctx context.Context, opt Options) (*Server, error) {
	if opt.Schema == "" {
		opt.Schema = "PUBLIC"
	}
	s := &Server{opt: opt, sessions: map[string]*session{}}
	if s.opt.StageDir == "" {
		d, err := os.MkdirTemp("", "snowflaketest-stage-*")
		if err != nil {
			return nil, err
		}
		s.opt.StageDir, s.ownStage = d, true
	}
	meta, err := pgx.Connect(ctx, opt.ConnString)
	if err != nil {
		return nil, fmt.Errorf("stand-in: connect to PostgreSQL: %w", err)
	}
	s.meta = meta
	for _, q := range []string{
		"CREATE SCHEMA IF NOT EXISTS " + quote(opt.Schema),
		`CREATE SCHEMA IF NOT EXISTS _standin`,
		// The declared Snowflake type of each column: PostgreSQL's jsonb cannot tell VARIANT from OBJECT.
		`CREATE TABLE IF NOT EXISTS _standin.columns (schema_name text, table_name text, column_name text, ordinal serial,
			data_type text, numeric_precision int, numeric_scale int, PRIMARY KEY (schema_name, table_name, column_name))`,
		`CREATE OR REPLACE FUNCTION public.parse_json(text) RETURNS jsonb LANGUAGE sql IMMUTABLE AS 'SELECT $1::jsonb'`,
		// TO_OBJECT (docs.snowflake.com/en/sql-reference/functions/to_object): "For a VARIANT value containing an
		// OBJECT, returns the OBJECT. For NULL input, or for a VARIANT value containing only JSON null, returns
		// NULL. … For all other input values, reports an error." An array is an error, as in Snowflake.
		`CREATE OR REPLACE FUNCTION public.to_object(v jsonb) RETURNS jsonb LANGUAGE plpgsql IMMUTABLE AS $f$
		BEGIN
			IF v IS NULL OR jsonb_typeof(v) = 'null' THEN RETURN NULL; END IF;
			IF jsonb_typeof(v) = 'object' THEN RETURN v; END IF;
			RAISE EXCEPTION 'sf:100071:22000:Failed to cast variant value % to OBJECT', v;
		END $f$`,
		// TO_ARRAY (…/functions/to_array): an ARRAY is unchanged, NULL or JSON null is NULL, any other value
		// becomes a single-element array.
		`CREATE OR REPLACE FUNCTION public.to_array(v jsonb) RETURNS jsonb LANGUAGE plpgsql IMMUTABLE AS $f$
		BEGIN
			IF v IS NULL OR jsonb_typeof(v) = 'null' THEN RETURN NULL; END IF;
			IF jsonb_typeof(v) = 'array' THEN RETURN v; END IF;
			RETURN jsonb_build_array(v);
		END $f$`,
	} {
		if _, err := meta.Exec(ctx, q); err != nil {
			meta.Close(ctx)
			return nil, fmt.Errorf("stand-in: set up PostgreSQL (%s): %w", q, err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		meta.Close(ctx)
		return nil, err
	}
	s.ln = ln
	s.Host = "127.0.0.1"
	s.Port = ln.Addr().(*net.TCPAddr).Port
	mux := http.NewServeMux()
	mux.HandleFunc("POST /session/v1/login-request", s.login)
	mux.HandleFunc("POST /queries/v1/query-request", s.query)
	mux.HandleFunc("POST /session/heartbeat", s.ok)
	mux.HandleFunc("POST /session/token-request", s.renew)
	mux.HandleFunc("POST /session", s.closeSession)
	mux.HandleFunc("POST /telemetry/send", s.ok)
	mux.HandleFunc("POST /queries/v1/abort-request", s.ok)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "stand-in: no such endpoint "+r.Method+" "+r.URL.Path, http.StatusNotFound)
	})
	s.http = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go s.http.Serve(ln)
	return s, nil
}

// New starts a stand-in for a test and closes it at the test's end.
func New(t testing.TB, opt Options) *Server {
	t.Helper()
	s, err := Start(context.Background(), opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Close stops the server and ends every session.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := s.http.Shutdown(ctx)
	s.mu.Lock()
	for k, x := range s.sessions {
		x.conn.Close(ctx)
		delete(s.sessions, k)
	}
	s.mu.Unlock()
	s.metaMu.Lock()
	s.meta.Close(ctx)
	s.metaMu.Unlock()
	if s.ownStage {
		os.RemoveAll(s.opt.StageDir)
	}
	return err
}

// Statements returns every statement the stand-in accepted, in order.
func (s *Server) Statements() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.statements...)
}

// Rejected returns the statements refused as outside the allow-list.
func (s *Server) Rejected() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.rejected...)
}

// SetRevoked replaces the privileges the role lacks.
func (s *Server) SetRevoked(r []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opt.Revoked = r
}

func (s *Server) revoked(p string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.opt.Revoked {
		if strings.EqualFold(r, p) {
			return true
		}
	}
	return false
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

func fail(w http.ResponseWriter, code int, state, msg string) {
	writeJSON(w, map[string]any{"success": false, "code": fmt.Sprintf("%06d", code), "message": msg,
		"data": map[string]any{"sqlState": state, "queryId": newID()}})
}

func (s *Server) ok(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, map[string]any{"success": true, "data": map[string]any{}})
}

func newID() string {
	b := make([]byte, 16)
	rand.Read(b)
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

type loginRequest struct {
	Data struct {
		AccountName   string `json:"ACCOUNT_NAME"`
		LoginName     string `json:"LOGIN_NAME"`
		Password      string `json:"PASSWORD"`
		Authenticator string `json:"AUTHENTICATOR"`
		Token         string `json:"TOKEN"`
	} `json:"data"`
}

func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	var req loginRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	d := req.Data
	if !strings.EqualFold(d.AccountName, s.opt.Account) {
		fail(w, 390100, "08004", "Incorrect username or password was specified.")
		return
	}
	var authErr error
	switch d.Authenticator {
	case "SNOWFLAKE_JWT":
		authErr = s.verifyJWT(d.Token)
	case "OAUTH":
		if s.opt.OAuthToken == "" || d.Token != s.opt.OAuthToken {
			fail(w, 390303, "08004", "Invalid OAuth access token.")
			return
		}
	default:
		if s.opt.Password == "" || d.LoginName != s.opt.User || d.Password != s.opt.Password {
			authErr = errors.New("password")
		}
	}
	if authErr != nil {
		if d.Authenticator == "SNOWFLAKE_JWT" {
			fail(w, 390144, "08004", "JWT token is invalid.")
		} else {
			fail(w, 390100, "08004", "Incorrect username or password was specified.")
		}
		return
	}
	if role := r.URL.Query().Get("roleName"); role != "" && role != s.opt.Role {
		fail(w, 390189, "08004", fmt.Sprintf("Role '%s' specified in the connect string is not granted to this user. Contact your local system administrator, or attempt to login with another role, e.g. PUBLIC.", role))
		return
	}
	conn, err := pgx.Connect(r.Context(), s.opt.ConnString)
	if err != nil {
		fail(w, 390400, "08001", "stand-in: PostgreSQL: "+err.Error())
		return
	}
	token := newID()
	s.mu.Lock()
	s.nextID++
	x := &session{id: s.nextID, conn: conn, pid: conn.PgConn().PID()}
	s.sessions[token] = x
	s.mu.Unlock()
	writeJSON(w, map[string]any{"success": true, "data": map[string]any{
		"token": token, "masterToken": "master-" + token, "validityInSeconds": 3600, "masterValidityInSeconds": 14400,
		"sessionId": x.id, "serverVersion": "stand-in",
		"parameters": []any{},
		"sessionInfo": map[string]any{"databaseName": s.opt.Database, "schemaName": s.opt.Schema,
			"warehouseName": s.opt.Warehouse, "roleName": s.opt.Role},
	}})
}

// verifyJWT checks a key-pair login token: RS256 over header.claims by the registered key, issuer naming the
// key's fingerprint, subject ACCOUNT.USER, not expired.
func (s *Server) verifyJWT(tok string) error {
	if s.opt.PublicKey == nil {
		return errors.New("no public key registered")
	}
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return errors.New("not a JWT")
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return err
	}
	h := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if err := rsa.VerifyPKCS1v15(s.opt.PublicKey, crypto.SHA256, h[:], sig); err != nil {
		return err
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return err
	}
	var c struct {
		Iss string `json:"iss"`
		Sub string `json:"sub"`
		Exp int64  `json:"exp"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return err
	}
	der, err := x509.MarshalPKIXPublicKey(s.opt.PublicKey)
	if err != nil {
		return err
	}
	fp := sha256.Sum256(der)
	who := strings.ToUpper(s.opt.Account) + "." + strings.ToUpper(s.opt.User)
	if c.Sub != who || c.Iss != who+".SHA256:"+base64.StdEncoding.EncodeToString(fp[:]) {
		return fmt.Errorf("claims iss %q sub %q", c.Iss, c.Sub)
	}
	if time.Now().Unix() > c.Exp {
		return errors.New("expired")
	}
	return nil
}

func (s *Server) sessionOf(r *http.Request) *session {
	a := r.Header.Get("Authorization")
	i := strings.Index(a, `Token="`)
	if i < 0 {
		return nil
	}
	tok := strings.TrimSuffix(a[i+len(`Token="`):], `"`)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sessions[tok]
}

func (s *Server) renew(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, map[string]any{"success": true, "data": map[string]any{}})
}

func (s *Server) closeSession(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("delete") == "true" {
		a := r.Header.Get("Authorization")
		if i := strings.Index(a, `Token="`); i >= 0 {
			tok := strings.TrimSuffix(a[i+len(`Token="`):], `"`)
			s.mu.Lock()
			x := s.sessions[tok]
			delete(s.sessions, tok)
			s.mu.Unlock()
			if x != nil {
				x.mu.Lock()
				x.conn.Close(r.Context())
				x.mu.Unlock()
			}
		}
	}
	s.ok(w, r)
}

type queryRequest struct {
	SQLText  string `json:"sqlText"`
	Bindings map[string]struct {
		Type  string  `json:"type"`
		Value *string `json:"value"`
	} `json:"bindings"`
}

// result is a statement's outcome in the response's terms.
type result struct {
	typeID  int64 // statementTypeId: 0x1000 select, 0x3000 DML, 0x6000 DDL and others
	columns []string
	rows    [][]*string
	extra   map[string]any // PUT's upload instructions
}

func (s *Server) query(w http.ResponseWriter, r *http.Request) {
	x := s.sessionOf(r)
	if x == nil {
		fail(w, 390112, "08001", "Your session has expired. Please login again.")
		return
	}
	var req queryRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	stmt := strings.TrimSpace(req.SQLText)
	if _, err := Allowed(stmt); err != nil {
		s.mu.Lock()
		s.rejected = append(s.rejected, stmt)
		s.mu.Unlock()
		fail(w, 1003, "42000", "SQL compilation error:\nstand-in: "+err.Error())
		return
	}
	s.mu.Lock()
	s.statements = append(s.statements, stmt)
	var injected *sfError
	for i, f := range s.failures {
		if strings.Contains(stmt, f.contains) {
			injected = f.err
			s.failures = append(s.failures[:i], s.failures[i+1:]...)
			break
		}
	}
	s.mu.Unlock()
	if injected != nil {
		fail(w, injected.code, injected.state, injected.msg)
		return
	}
	args := make([]any, len(req.Bindings))
	for k, b := range req.Bindings {
		i, err := strconv.Atoi(k)
		if err != nil || i < 1 || i > len(args) {
			fail(w, 1003, "42000", "stand-in: binding "+k+" out of range")
			return
		}
		if b.Value != nil {
			args[i-1] = *b.Value
		}
	}
	// A statement runs to its end even when its client goes away, as in Snowflake (a killed client's open
	// transaction stays open, for the next process to abort); pgx would also close a connection whose
	// query was interrupted.
	x.mu.Lock()
	res, err := s.run(context.WithoutCancel(r.Context()), x, stmt, args)
	x.mu.Unlock()
	if err != nil {
		var se *sfError
		var pe *pgconn.PgError
		if errors.As(err, &pe) {
			se = fromPostgres(pe)
		}
		if se != nil || errors.As(err, &se) {
			fail(w, se.code, se.state, se.msg)
		} else {
			fail(w, 100000, "XX000", "stand-in (PostgreSQL): "+err.Error())
		}
		return
	}
	data := map[string]any{"queryId": newID(), "statementTypeId": res.typeID, "queryResultFormat": "json",
		"sqlState": "00000", "parameters": []any{}, "finalDatabaseName": s.opt.Database, "finalSchemaName": s.opt.Schema}
	rowtype := make([]map[string]any, len(res.columns))
	for i, c := range res.columns {
		rowtype[i] = map[string]any{"name": c, "type": "text", "nullable": true, "length": 16777216}
	}
	if len(rowtype) == 0 {
		rowtype = []map[string]any{{"name": "status", "type": "text", "nullable": true}}
		ok := "Statement executed successfully."
		res.rows = [][]*string{{&ok}}
	}
	data["rowtype"] = rowtype
	data["rowset"] = res.rows
	data["total"] = len(res.rows)
	data["returned"] = len(res.rows)
	for k, v := range res.extra {
		data[k] = v
	}
	writeJSON(w, map[string]any{"success": true, "data": data})
}

// Rows reads a table of the stand-in's schema straight from PostgreSQL (not through the protocol, which
// allows only the plugin's statements), one JSON object per row with the column names as keys, for a test
// to compare with its source.
func (s *Server) Rows(ctx context.Context, table string) ([]map[string]any, error) {
	s.metaMu.Lock()
	defer s.metaMu.Unlock()
	rows, err := s.meta.Query(ctx, "SELECT to_jsonb(t)::text FROM "+quote(s.opt.Schema)+"."+quote(table)+" t")
	if err != nil {
		return nil, err
	}
	texts, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	// Numbers stay as their text (json.Number): a NUMBER(38,37) holds more digits than a float64.
	out := make([]map[string]any, len(texts))
	for i, t := range texts {
		d := json.NewDecoder(strings.NewReader(t))
		d.UseNumber()
		if err := d.Decode(&out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ResetRejected forgets the refused statements (a test that sends its own).
func (s *Server) ResetRejected() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rejected = nil
}

// failure is an error the stand-in answers, once, for the next statement that contains a text.
type failure struct {
	contains string
	err      *sfError
}

// FailNext makes the next accepted statement containing contains fail with Snowflake error code and SQL state
// state, without running it: for tests of how the plugin classifies the errors the service documents.
func (s *Server) FailNext(contains string, code int, state, msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures = append(s.failures, failure{contains: contains, err: &sfError{code: code, state: state, msg: msg}})
}

// fromPostgres answers a PostgreSQL error as Snowflake answers the same fault (Snowflake's error reference and
// the messages its documentation shows): a value out of a NUMBER's range, a value a type cannot read, a
// column or table that does not exist; an error the stand-in's own functions raise as "sf:code:state:message".
// nil: no Snowflake equivalent is modelled, and the caller answers a generic internal error.
func fromPostgres(pe *pgconn.PgError) *sfError {
	if rest, ok := strings.CutPrefix(pe.Message, "sf:"); ok {
		parts := strings.SplitN(rest, ":", 3)
		if len(parts) == 3 {
			code, err := strconv.Atoi(parts[0])
			if err == nil {
				return &sfError{code: code, state: parts[1], msg: parts[2]}
			}
		}
	}
	switch pe.Code {
	case "22003": // numeric_value_out_of_range
		return &sfError{code: 100039, state: "22003", msg: "Numeric value out of range (" + pe.Message + ")"}
	case "22P02", "22007", "22008": // invalid_text_representation, invalid_datetime_format, datetime_field_overflow
		return &sfError{code: 100038, state: "22018", msg: "Value is not recognized (" + pe.Message + ")"}
	case "42703": // undefined_column
		return &sfError{code: 904, state: "42000", msg: "SQL compilation error:\ninvalid identifier (" + pe.Message + ")"}
	case "42P01": // undefined_table
		return &sfError{code: 2003, state: "42S02", msg: "SQL compilation error:\nObject does not exist or not authorized. (" + pe.Message + ")"}
	}
	return nil
}
