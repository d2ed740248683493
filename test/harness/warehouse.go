package harness

import (
	"context"
	"crypto/rsa"
	"crypto/x509"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math"
	"math/big"
	mrand "math/rand/v2"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigquery"
	"github.com/jackc/pgx/v5"
	sf "github.com/snowflakedb/gosnowflake"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"
)

// The live legs of the warehouse tests (test/chaos, test/e2e): when SKIPPR_SNOWFLAKE_* or SKIPPR_BIGQUERY_*
// are set (plugins/snowflake/README.md and plugins/bigquery/README.md, "Tests"; `make live-snowflake`,
// `make live-bigquery`), a test that otherwise runs against testkit's stand-in runs `skippr sync` against
// the real service and reads the rows back through the service's own client. Each run works in a schema or
// dataset of its own (SKIPPR_TEST_<run>), made at the start and dropped with everything in it at the end, so
// runs repeat and overlap and nothing is left behind; the pipeline ids of the configs need no prefix, since
// the state table lives in that schema or dataset too.

// runID is unique per call: nanoseconds and a random suffix.
func runID() string { return fmt.Sprintf("%x%04x", time.Now().UnixNano(), mrand.IntN(1<<16)) }

// SnowflakeLive is a real Snowflake account named by SKIPPR_SNOWFLAKE_ACCOUNT, _USER, _PASSWORD or
// _PRIVATE_KEY, _WAREHOUSE, _DATABASE and _ROLE, with a schema made for one test.
type SnowflakeLive struct {
	Account, User, Warehouse, Database, Role string
	// Schema is the test's own schema in Database (SKIPPR_TEST_<run>), dropped at the end of the test.
	Schema string
	// secret is the password or the private key's PEM; the config reads it from the environment (Env).
	password, privateKey string
	db                   *sql.DB
}

// SnowflakeFromEnv returns the account of SKIPPR_SNOWFLAKE_*, or nil when SKIPPR_SNOWFLAKE_ACCOUNT is unset.
// It creates the test's schema and drops it (CASCADE: the tables, their stages and the state table) when
// the test ends. Missing variables besides the account fail the test, naming them.
func SnowflakeFromEnv(t *testing.T) *SnowflakeLive {
	t.Helper()
	if os.Getenv("SKIPPR_SNOWFLAKE_ACCOUNT") == "" {
		return nil
	}
	s := &SnowflakeLive{Account: os.Getenv("SKIPPR_SNOWFLAKE_ACCOUNT"), User: os.Getenv("SKIPPR_SNOWFLAKE_USER"),
		Warehouse: os.Getenv("SKIPPR_SNOWFLAKE_WAREHOUSE"), Database: os.Getenv("SKIPPR_SNOWFLAKE_DATABASE"),
		Role: os.Getenv("SKIPPR_SNOWFLAKE_ROLE"), password: os.Getenv("SKIPPR_SNOWFLAKE_PASSWORD"),
		privateKey: os.Getenv("SKIPPR_SNOWFLAKE_PRIVATE_KEY"), Schema: strings.ToUpper("SKIPPR_TEST_" + runID())}
	for name, v := range map[string]string{"USER": s.User, "WAREHOUSE": s.Warehouse, "DATABASE": s.Database, "PASSWORD or _PRIVATE_KEY": s.password + s.privateKey} {
		if v == "" {
			t.Fatalf("SKIPPR_SNOWFLAKE_ACCOUNT is set but SKIPPR_SNOWFLAKE_%s is not", name)
		}
	}
	utc := "UTC"
	cfg := &sf.Config{Account: s.Account, User: s.User, Database: s.Database, Warehouse: s.Warehouse, Role: s.Role,
		Application: "skippr-tests", DisableTelemetry: true, Params: map[string]*string{"TIMEZONE": &utc}}
	if s.password != "" {
		cfg.Authenticator, cfg.Password = sf.AuthTypeSnowflake, s.password
	} else {
		key, err := rsaKey(s.privateKey)
		if err != nil {
			t.Fatalf("SKIPPR_SNOWFLAKE_PRIVATE_KEY: %v", err)
		}
		cfg.Authenticator, cfg.PrivateKey = sf.AuthTypeJwt, key
	}
	s.db = sql.OpenDB(sf.NewConnector(sf.SnowflakeDriver{}, *cfg))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := s.db.ExecContext(ctx, "CREATE SCHEMA "+s.qualified()); err != nil {
		t.Fatalf("live Snowflake: create the test's schema %s (the role needs CREATE SCHEMA on database %s): %v", s.qualified(), s.Database, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if _, err := s.db.ExecContext(ctx, "DROP SCHEMA IF EXISTS "+s.qualified()+" CASCADE"); err != nil {
			t.Errorf("live Snowflake cleanup: drop schema %s: %v", s.qualified(), err)
		}
		s.db.Close()
	})
	t.Logf("live Snowflake: account %s, schema %s", s.Account, s.qualified())
	return s
}

func rsaKey(p string) (*rsa.PrivateKey, error) {
	block, _ := pem.Decode([]byte(p))
	if block == nil {
		return nil, errors.New("not PEM")
	}
	if k, err := x509.ParsePKCS8PrivateKey(block.Bytes); err == nil {
		if rk, ok := k.(*rsa.PrivateKey); ok {
			return rk, nil
		}
		return nil, fmt.Errorf("a %T, not an RSA key", k)
	}
	return x509.ParsePKCS1PrivateKey(block.Bytes)
}

func sfIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

func (s *SnowflakeLive) qualified() string { return sfIdent(s.Database) + "." + sfIdent(s.Schema) }

// Settings is the snowflake connection's settings as a YAML flow mapping; the secret is read from the
// environment variable SNOWFLAKE_SECRET, which Env sets.
func (s *SnowflakeLive) Settings() string {
	secret := "password"
	if s.password == "" {
		secret = "private_key"
	}
	return fmt.Sprintf(`{ account: %q, user: %q, %s: "${SNOWFLAKE_SECRET}", warehouse: %q, role: %q, database: %q, schema: %q }`,
		s.Account, s.User, secret, s.Warehouse, s.Role, s.Database, s.Schema)
}

// Env is what a harness.Env's ExtraEnv needs for Settings.
func (s *SnowflakeLive) Env() []string {
	return []string{"SNOWFLAKE_SECRET=" + s.password + s.privateKey}
}

// Rows reads a table of the test's schema in the form testkit/snowflaketest's Server.Rows gives (PostgreSQL's
// to_jsonb of the stand-in's storage), so one comparison serves both: numbers as json.Number with all their
// digits, FLOAT as a number or "NaN"/"Infinity"/"-Infinity", BINARY as "\x" and hex, DATE as YYYY-MM-DD, TIME
// and TIMESTAMP_NTZ as ISO text with microseconds, TIMESTAMP_TZ with its offset, ARRAY/OBJECT/VARIANT decoded.
// Each column is read as text Snowflake formats exactly (TO_VARCHAR with a format), never through a float.
func (s *SnowflakeLive) Rows(ctx context.Context, table string) ([]map[string]any, error) {
	cols, err := s.db.QueryContext(ctx, `SELECT "COLUMN_NAME", "DATA_TYPE" FROM `+sfIdent(s.Database)+
		`."INFORMATION_SCHEMA"."COLUMNS" WHERE "TABLE_SCHEMA" = ? AND "TABLE_NAME" = ? ORDER BY "ORDINAL_POSITION"`, s.Schema, table)
	if err != nil {
		return nil, fmt.Errorf("columns of %s: %w", table, err)
	}
	var names, types, exprs []string
	for cols.Next() {
		var n, ty string
		if err := cols.Scan(&n, &ty); err != nil {
			cols.Close()
			return nil, err
		}
		c := sfIdent(n)
		e := c
		switch ty {
		case "NUMBER", "FIXED":
			e = "TO_VARCHAR(" + c + ")"
		case "DATE":
			e = "TO_VARCHAR(" + c + ", 'YYYY-MM-DD')"
		case "TIME":
			e = "TO_VARCHAR(" + c + ", 'HH24:MI:SS.FF6')"
		case "TIMESTAMP_NTZ":
			e = "TO_VARCHAR(" + c + `, 'YYYY-MM-DD"T"HH24:MI:SS.FF6')`
		case "TIMESTAMP_TZ", "TIMESTAMP_LTZ":
			e = "TO_VARCHAR(" + c + `, 'YYYY-MM-DD"T"HH24:MI:SS.FF6TZH:TZM')`
		case "ARRAY", "OBJECT", "VARIANT":
			e = "TO_JSON(" + c + ")"
		}
		names, types, exprs = append(names, n), append(types, ty), append(exprs, e)
	}
	cols.Close()
	if err := cols.Err(); err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("table %s.%s does not exist", s.qualified(), table)
	}
	rows, err := s.db.QueryContext(ctx, "SELECT "+strings.Join(exprs, ", ")+" FROM "+s.qualified()+"."+sfIdent(table))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", table, err)
	}
	defer rows.Close()
	var out []map[string]any
	for rows.Next() {
		vals := make([]any, len(names))
		ptrs := make([]any, len(names))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		row := map[string]any{}
		for i, n := range names {
			v, err := sfValue(types[i], vals[i])
			if err != nil {
				return nil, fmt.Errorf("%s.%s: %w", table, n, err)
			}
			row[n] = v
		}
		out = append(out, row)
	}
	return out, rows.Err()
}

func sfValue(ty string, v any) (any, error) {
	if v == nil {
		return nil, nil
	}
	text := func() string {
		if b, ok := v.([]byte); ok {
			return string(b)
		}
		return fmt.Sprint(v)
	}
	switch ty {
	case "NUMBER", "FIXED":
		return json.Number(text()), nil
	case "FLOAT", "REAL":
		f, ok := v.(float64)
		if !ok {
			var err error
			if f, err = strconv.ParseFloat(strings.NewReplacer("inf", "Inf").Replace(text()), 64); err != nil {
				return nil, err
			}
		}
		switch {
		case math.IsNaN(f):
			return "NaN", nil
		case math.IsInf(f, 1):
			return "Infinity", nil
		case math.IsInf(f, -1):
			return "-Infinity", nil
		}
		return json.Number(strconv.FormatFloat(f, 'g', -1, 64)), nil
	case "BINARY":
		b, ok := v.([]byte)
		if !ok {
			return nil, fmt.Errorf("BINARY read as %T", v)
		}
		return `\x` + hex.EncodeToString(b), nil
	case "BOOLEAN":
		if b, ok := v.(bool); ok {
			return b, nil
		}
		return strconv.ParseBool(text())
	case "ARRAY", "OBJECT", "VARIANT":
		var x any
		d := json.NewDecoder(strings.NewReader(text()))
		d.UseNumber()
		if err := d.Decode(&x); err != nil {
			return nil, err
		}
		return x, nil
	}
	return text(), nil
}

// BigQueryLive is a real BigQuery project named by SKIPPR_BIGQUERY_PROJECT (and SKIPPR_BIGQUERY_LOCATION),
// with a dataset made for one test. Credentials: SKIPPR_BIGQUERY_CREDENTIALS_JSON, or application-default.
type BigQueryLive struct {
	Project, Location string
	// Dataset is the test's own dataset (skippr_test_<run>), deleted with its contents at the end of the test.
	Dataset     string
	credentials string
	client      *bigquery.Client
}

// BigQueryFromEnv returns the project of SKIPPR_BIGQUERY_PROJECT, or nil when it is unset. It creates the
// test's dataset (in SKIPPR_BIGQUERY_LOCATION, default US) and deletes it with its contents when the test ends.
func BigQueryFromEnv(t *testing.T) *BigQueryLive {
	t.Helper()
	p := os.Getenv("SKIPPR_BIGQUERY_PROJECT")
	if p == "" {
		return nil
	}
	b := &BigQueryLive{Project: p, Location: os.Getenv("SKIPPR_BIGQUERY_LOCATION"), Dataset: "skippr_test_" + runID(),
		credentials: os.Getenv("SKIPPR_BIGQUERY_CREDENTIALS_JSON")}
	if b.Location == "" {
		b.Location = "US"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var opts []option.ClientOption
	if b.credentials != "" {
		opts = append(opts, option.WithAuthCredentialsJSON(option.ServiceAccount, []byte(b.credentials)))
	}
	c, err := bigquery.NewClient(ctx, p, opts...)
	if err != nil {
		t.Fatalf("live BigQuery: client for project %s: %v", p, err)
	}
	b.client = c
	if err := c.Dataset(b.Dataset).Create(ctx, &bigquery.DatasetMetadata{Location: b.Location}); err != nil {
		t.Fatalf("live BigQuery: create the test's dataset %s (the credentials need bigquery.datasets.create): %v", b.Dataset, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := c.Dataset(b.Dataset).DeleteWithContents(ctx); err != nil {
			t.Errorf("live BigQuery cleanup: delete dataset %s: %v", b.Dataset, err)
		}
		c.Close()
	})
	t.Logf("live BigQuery: project %s, dataset %s", p, b.Dataset)
	return b
}

// Settings is the bigquery connection's settings as a YAML flow mapping (extra: more `key: value` pairs);
// the credentials are read from BIGQUERY_CREDENTIALS, which Env sets.
func (b *BigQueryLive) Settings(extra string) string {
	s := fmt.Sprintf(`{ project: %q, dataset: %q, location: %q`, b.Project, b.Dataset, b.Location)
	if b.credentials != "" {
		s += `, credentials_json: "${BIGQUERY_CREDENTIALS}"`
	}
	if extra != "" {
		s += ", " + extra
	}
	return s + " }"
}

// Env is what a harness.Env's ExtraEnv needs for Settings.
func (b *BigQueryLive) Env() []string { return []string{"BIGQUERY_CREDENTIALS=" + b.credentials} }

// Rows reads a table of the test's dataset as TO_JSON_STRING gives each row: numbers as json.Number, BYTES
// as base64, DATE/TIME/DATETIME as ISO text, TIMESTAMP in UTC with Z, arrays and JSON decoded.
func (b *BigQueryLive) Rows(ctx context.Context, table string) ([]map[string]any, error) {
	q := b.client.Query(fmt.Sprintf("SELECT TO_JSON_STRING(t) AS j FROM `%s.%s.%s` AS t", b.Project, b.Dataset, table))
	q.Location = b.Location
	it, err := q.Read(ctx)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", table, err)
	}
	var out []map[string]any
	for {
		var row []bigquery.Value
		err := it.Next(&row)
		if errors.Is(err, iterator.Done) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", table, err)
		}
		var m map[string]any
		d := json.NewDecoder(strings.NewReader(fmt.Sprint(row[0])))
		d.UseNumber()
		if err := d.Decode(&m); err != nil {
			return nil, fmt.Errorf("read %s: %w", table, err)
		}
		out = append(out, m)
	}
}

// SameWarehouseValue compares a warehouse's value (a stand-in's to_jsonb of its storage, or a live reader's
// Rows) with the source's to_jsonb: numbers by value (1.25 and 1.250 are one NUMBER; a float64 would also
// call 0.1+0.2 and 0.3 the same), timestamps as instants, a JSON text (jsonb lands in VARCHAR in Snowflake)
// parsed, arrays and objects element by element.
func SameWarehouseValue(dst, src any) bool {
	if reflect.DeepEqual(dst, src) {
		return true
	}
	switch a := dst.(type) {
	case json.Number:
		b, ok := src.(json.Number)
		if !ok {
			return false
		}
		ra, okA := new(big.Rat).SetString(string(a))
		rb, okB := new(big.Rat).SetString(string(b))
		return okA && okB && ra.Cmp(rb) == 0
	case string:
		if b, ok := src.(string); ok {
			ta, errA := time.Parse(time.RFC3339Nano, a)
			tb, errB := time.Parse(time.RFC3339Nano, b)
			return errA == nil && errB == nil && ta.Equal(tb)
		}
		d := json.NewDecoder(strings.NewReader(a))
		d.UseNumber()
		var v any
		if d.Decode(&v) == nil {
			return SameWarehouseValue(v, src)
		}
	case []any:
		b, ok := src.([]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if !SameWarehouseValue(a[i], b[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		b, ok := src.(map[string]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, v := range a {
			if !SameWarehouseValue(v, b[k]) {
				return false
			}
		}
		return true
	}
	return false
}

// Querier is what PostgresJSONRows reads with: a *pgx.Conn or a *pgxpool.Pool.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// PostgresJSONRows reads table (schema-qualified, quoted as needed) of a stand-in's PostgreSQL as row_to_json
// of each row, numbers kept as json.Number: the form of testkit/snowflaketest's Server.Rows, but with each
// value written by its type's output function, so a float's -0 keeps its sign (to_jsonb turns numbers into
// jsonb numerics, which have no -0).
func PostgresJSONRows(ctx context.Context, q Querier, table string) ([]map[string]any, error) {
	rows, err := q.Query(ctx, "SELECT row_to_json(t)::text FROM "+table+" t")
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", table, err)
	}
	texts, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", table, err)
	}
	out := make([]map[string]any, len(texts))
	for i, text := range texts {
		d := json.NewDecoder(strings.NewReader(text))
		d.UseNumber()
		if err := d.Decode(&out[i]); err != nil {
			return nil, fmt.Errorf("read %s: %w", table, err)
		}
	}
	return out, nil
}
