package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skippr-dev/skippr/test/harness"
	"github.com/skippr-dev/skippr/testkit/bigquerytest"
	"github.com/skippr-dev/skippr/testkit/pgtest"
	"github.com/skippr-dev/skippr/testkit/snowflaketest"
)

// The type matrix into the warehouses (issue #29, item 3): pgtest.TypeMatrix through the real postgres
// source and `skippr sync` into Snowflake or BigQuery — the stand-ins of testkit, or the real service when
// SKIPPR_SNOWFLAKE_* / SKIPPR_BIGQUERY_* are set (`make live-snowflake`, `make live-bigquery`) — as a snapshot,
// then the same values streamed as inserts, an update of every streamed row and deletes, each sync a new
// process; then every value is read back and compared with what PostgreSQL holds, in the canonical form of
// its Arrow type (expectedRows, canon: a value off by a microsecond, a lost sign or a dropped element fails).
//
// What a warehouse's README says it refuses is left out of the source and named here (refusedBy*): those
// values stop the pipeline with a data error by design (TestOutOfRangeTimesAreDataErrors of each plugin), so
// they cannot be in a table the pipeline carries. Every other value of the matrix is carried.

// warehouseMatrix is the matrix without the columns and values a warehouse refuses: refuse names the reason
// for a column (value "") or one value, or returns "" to keep it.
type warehouseMatrix struct {
	cols    []pgtest.TypeCase
	dropped []string // what was left out and why, for the log
}

func newWarehouseMatrix(refuse func(c pgtest.TypeCase, value string) string) warehouseMatrix {
	var m warehouseMatrix
	for _, c := range pgtest.TypeMatrix {
		if why := refuse(c, ""); why != "" {
			m.dropped = append(m.dropped, c.Col+": "+why)
			continue
		}
		kept := pgtest.TypeCase{Col: c.Col, PGType: c.PGType, Arrow: c.Arrow}
		for _, v := range c.Values {
			if why := refuse(c, v); why != "" {
				m.dropped = append(m.dropped, c.Col+" "+v+": "+why)
				continue
			}
			kept.Values = append(kept.Values, v)
		}
		m.cols = append(m.cols, kept)
	}
	return m
}

// insert inserts rows base … base+n: row base+k takes value k of each column (NULL when a column has fewer),
// row base is all NULL; it returns n+1.
func (m warehouseMatrix) insert(t *testing.T, db *pgtest.DB, base int) int {
	t.Helper()
	n := 0
	for _, c := range m.cols {
		n = max(n, len(c.Values))
	}
	var stmts []string
	for k := 0; k <= n; k++ {
		vals := []string{fmt.Sprint(base + k)}
		for _, c := range m.cols {
			v := "NULL"
			if k > 0 && k <= len(c.Values) {
				v = c.Values[k-1] + "::" + c.PGType
			}
			vals = append(vals, v)
		}
		stmts = append(stmts, "INSERT INTO types VALUES ("+strings.Join(vals, ", ")+")")
	}
	db.Exec(t, strings.Join(stmts, ";\n"))
	return n + 1
}

func (m warehouseMatrix) ddl() string {
	cols := []string{"id int PRIMARY KEY"}
	for _, c := range m.cols {
		cols = append(cols, c.Col+" "+c.PGType)
	}
	return pgtest.TypeMatrixDDL + ";\nCREATE TABLE types (" + strings.Join(cols, ", ") + ");\nALTER TABLE types REPLICA IDENTITY FULL"
}

// pastTheDay: PostgreSQL's time takes 24:00:00; neither warehouse's TIME does (a data error in both plugins).
func pastTheDay(c pgtest.TypeCase, v string) bool {
	return c.Arrow == "time64[us]" && v == "'24:00:00'"
}

// outsideYears1To9999 says whether a matrix value of a date or timestamp column (or a list of them) is one
// both warehouses refuse: infinite, BC, or past year 9999.
func outsideYears1To9999(c pgtest.TypeCase, v string) bool {
	if !strings.Contains(c.Arrow, "date32") && !strings.Contains(c.Arrow, "timestamp") {
		return false
	}
	return strings.Contains(v, "infinity") || strings.Contains(v, "BC") || strings.Contains(v, "294247") || strings.Contains(v, "5874897")
}

// refusedBySnowflake is plugins/snowflake/README.md's "What it refuses" and UnsupportedTypes as they meet the
// matrix.
func refusedBySnowflake(c pgtest.TypeCase, v string) string {
	switch {
	case v == "" && strings.Contains(c.Arrow, "interval"):
		return "intervals have no Snowflake type (UnsupportedTypes: the engine refuses the pipeline at start)"
	case v != "" && outsideYears1To9999(c, v):
		return "outside Snowflake's years 1–9999 (data error)"
	case pastTheDay(c, v):
		return "past Snowflake's TIME 23:59:59.999999999 (data error)"
	}
	return ""
}

// refusedByBigQuery is plugins/bigquery/README.md's "What it refuses" as it meets the matrix.
func refusedByBigQuery(c pgtest.TypeCase, v string) string {
	switch {
	case v != "" && outsideYears1To9999(c, v):
		return "outside BigQuery's years 1–9999 (data error)"
	case pastTheDay(c, v):
		return "past BigQuery's TIME 23:59:59.999999 (data error)"
	case v != "" && strings.HasPrefix(c.Arrow, "list<") && (strings.Contains(v, "NULL,") || strings.Contains(v, ",NULL}")):
		return "a NULL array element (BigQuery arrays hold none: data error)"
	}
	return ""
}

// TestTypeMatrixIntoSnowflake: the matrix into Snowflake (the stand-in, or the account of SKIPPR_SNOWFLAKE_*).
func TestTypeMatrixIntoSnowflake(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	m := newWarehouseMatrix(refusedBySnowflake)
	live := harness.SnowflakeFromEnv(t)
	var settings string
	var env []string
	var read func(context.Context, string) ([]map[string]any, error)
	var sf *snowflaketest.Server
	if live == nil {
		storage := pgtest.NewDB(t)
		sf = snowflaketest.New(t, snowflaketest.Options{Account: "matrix", User: "loader", Password: "s3cret",
			Database: "ANALYTICS", Schema: "RAW", Warehouse: "LOAD_WH", Role: "LOADER", ConnString: storage.ConnString()})
		settings = fmt.Sprintf(`{ account: matrix, user: loader, password: "${SNOWFLAKE_SECRET}", warehouse: LOAD_WH, role: LOADER, database: ANALYTICS, schema: RAW, host: %s, port: %d, protocol: http }`, sf.Host, sf.Port)
		env = []string{"SNOWFLAKE_SECRET=s3cret"}
		// The stand-in's storage read directly (row_to_json rather than Server.Rows' to_jsonb, which turns a
		// float's -0 into 0).
		read = func(ctx context.Context, table string) ([]map[string]any, error) {
			return harness.PostgresJSONRows(ctx, storage.Connect(t), `"RAW".`+pgx.Identifier{table}.Sanitize())
		}
	} else {
		settings, env, read = live.Settings(), live.Env(), live.Rows
	}
	checkWarehouseMatrix(ctx, t, m, "snowflake", settings, env, func() map[string]map[string]any {
		got, err := read(ctx, "TYPES")
		if err != nil {
			t.Fatal(err)
		}
		return byLowerID(t, got)
	}, readerWarehouse, nil)
	if sf != nil {
		if r := sf.Rejected(); len(r) > 0 {
			t.Errorf("the stand-in refused statements outside the allow-list: %q", r)
		}
	}
}

// TestTypeMatrixIntoBigQuery: the matrix into BigQuery (the stand-in, or the project of SKIPPR_BIGQUERY_*).
func TestTypeMatrixIntoBigQuery(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	m := newWarehouseMatrix(refusedByBigQuery)
	live := harness.BigQueryFromEnv(t)
	var settings string
	var env []string
	var read func(context.Context, string) ([]map[string]any, error)
	reader := readerWarehouse
	if live == nil {
		bq := bigquerytest.Start(t, "skippr-matrix")
		settings = fmt.Sprintf(`{ project: %s, dataset: matrix, endpoint: "%s" }`, bq.Project, bq.URL)
		read = func(ctx context.Context, table string) ([]map[string]any, error) {
			return harness.PostgresJSONRows(ctx, bq.Pool(), "matrix."+table)
		}
	} else {
		settings, env, read, reader = live.Settings(""), live.Env(), live.Rows, readerBigQueryLive
	}
	// BigQuery's JSON columns (json and jsonb, by the source's postgres.type) are compared as JSON, and its
	// arrays hold no NULL: a NULL list is an empty array (plugins/bigquery/README.md, Tables and types).
	adjust := func(kinds map[string]string, want map[string]map[string]string) {
		for _, c := range m.cols {
			if c.PGType == "json" || c.PGType == "jsonb" {
				kinds[c.Col] = "json"
			}
		}
		for _, row := range want {
			for col, k := range kinds {
				if strings.HasPrefix(k, "list<") && row[col] == "NULL" {
					row[col] = "[]"
				}
			}
		}
	}
	checkWarehouseMatrix(ctx, t, m, "bigquery", settings, env, func() map[string]map[string]any {
		got, err := read(ctx, "types")
		if err != nil {
			t.Fatal(err)
		}
		return byLowerID(t, got)
	}, reader, adjust)
}

// checkWarehouseMatrix syncs the matrix and compares every value read back with the source.
func checkWarehouseMatrix(ctx context.Context, t *testing.T, m warehouseMatrix, plugin, settings string, env []string,
	read func() map[string]map[string]any, reader string, adjust func(map[string]string, map[string]map[string]string)) {
	t.Helper()
	for _, d := range m.dropped {
		t.Logf("left out: %s", d)
	}
	db := pgtest.NewDB(t)
	db.Exec(t, m.ddl())
	rows := m.insert(t, db, 0)

	e := harness.NewEnvWith(t, "postgres", plugin)
	e.ExtraEnv = append(e.ExtraEnv, env...)
	e.WriteConfig(fmt.Sprintf(`connections:
  src:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: %[1]s, port: %[2]d, user: postgres, database: %[3]s, sslmode: disable, tables: [public.types], slot: matrix, publication: matrix }
  wh:
    plugin: %[4]s
    version: "~> 0.1"
    settings: %[5]s
pipelines:
  matrix:
    source: src
    destinations: [wh]
    delivery: exactly-once
    wal:
      url: file://%[6]s
`, db.Server.Host, db.Server.Port, db.Name, plugin, settings, filepath.Join(e.Dir, "wal")))
	e.MustRun("sync", "--once") // the snapshot

	// The same values streamed as inserts; then every streamed row updated (REPLICA IDENTITY FULL: the whole
	// row again) and a snapshot row and a streamed one deleted. Each sync is a new process.
	m.insert(t, db, 100)
	e.MustRun("sync", "--once")
	db.Exec(t, `UPDATE types SET id = id WHERE id >= 100; DELETE FROM types WHERE id IN (1, 101)`)
	e.MustRun("sync", "--once")

	kinds := map[string]string{"id": "int32"}
	for _, c := range m.cols {
		kinds[c.Col] = c.Arrow
	}
	want := expectedRows(ctx, t, db.Connect(t), "types", m.cols, kinds)
	if len(want) != 2*rows-2 {
		t.Fatalf("source has %d rows, want %d", len(want), 2*rows-2)
	}
	if adjust != nil {
		adjust(kinds, want)
		// The kinds adjust changed are canonicalised again from PostgreSQL's text.
		for id, row := range expectedRows(ctx, t, db.Connect(t), "types", m.cols, kinds) {
			for col, k := range kinds {
				if k == "json" {
					want[id][col] = row[col]
				}
			}
		}
	}
	for _, row := range want {
		delete(row, "_skippr_meta")
	}
	compareMatrix(t, plugin+" ("+reader+")", reader, kinds, want, read())

	// A value left out is refused, not changed: 24:00:00 stops the pipeline with a data error naming it.
	db.Exec(t, `INSERT INTO types (id, c_time) VALUES (1000, '24:00:00')`)
	r := e.Run("sync", "--once")
	if r.Code == 0 || !strings.Contains(r.Stderr, "failed (data)") || !strings.Contains(r.Stderr, "column c_time") || !strings.Contains(r.Stderr, "24:00:00") {
		t.Errorf("sync of a time 24:00:00: exit %d, want a data error naming column c_time and the value:\n%s", r.Code, r.Stderr)
	}
}

// byLowerID keys rows by their id and lower-cases the column names (Snowflake upper-cases simple names).
func byLowerID(t *testing.T, rows []map[string]any) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, r := range rows {
		low := map[string]any{}
		for k, v := range r {
			low[strings.ToLower(k)] = v
		}
		id := fmt.Sprint(low["id"])
		if _, dup := out[id]; dup {
			t.Fatalf("id %s is in the warehouse table twice", id)
		}
		out[id] = low
	}
	return out
}
