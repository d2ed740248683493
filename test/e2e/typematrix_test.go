package e2e

import (
	"context"
	"encoding/base64"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skippr-dev/skippr/test/harness"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// TestTypeMatrixIntoIceberg syncs the type matrix (every type of the postgres plugin's mapping table, with
// its edge values) from PostgreSQL into an Iceberg lake — rows inserted before the snapshot and again while
// streaming — and checks every value three ways against what PostgreSQL itself prints: the lake read with
// iceberg-go (`skippr-plugin-iceberg scan`, deletes applied), `skippr query --format json` and `skippr query
// --format csv`. Values PostgreSQL has that Arrow cannot hold (numeric NaN, a year past timestamp[us], a 2-D
// array, an array's lower bound) go through on_unrepresentable: null_and_record, and each reader sees the NULL
// (or the kept elements) and the record in _skippr_meta.
//
// Each reader prints a value its own way (DuckDB writes 4713 BC as "4713-01-01 (BC)", iceberg-go's JSON a
// date as Go formats it, a bytea as base64), so both sides are brought to one canonical form per Arrow type
// before they are compared: an integer for dates, times and timestamps, a rational for decimals, the bits of
// a float, bytes for binaries. Nothing is compared loosely: a value off by one microsecond, a lost sign or
// a dropped list element fails.
func TestTypeMatrixIntoIceberg(t *testing.T) {
	db := pgtest.NewDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	db.Exec(t, pgtest.TypeMatrixDDL+`;
		CREATE TABLE types (id int PRIMARY KEY, `+pgtest.TypeMatrixColumns()+`);
		ALTER TABLE types REPLICA IDENTITY FULL;
		CREATE TABLE odd (id int PRIMARY KEY, n numeric(10,2), ts timestamp, grid int[], lb int[], note text);
		ALTER TABLE odd REPLICA IDENTITY FULL`)
	rows := pgtest.TypeMatrixRows()
	db.InsertTypeMatrix(t, "types", 0)
	insertOdd := func(base int) {
		db.Exec(t, fmt.Sprintf(`INSERT INTO odd VALUES
			(%[1]d, 'NaN', '294276-12-31 23:59:59', '{{1,2},{3,4}}', '[0:2]={7,8,9}', 'ünïcödé'),
			(%[1]d + 1, 12.5, '2024-01-01 00:00:00', '{5,6}', '{}', NULL)`, base))
	}
	insertOdd(0)

	e := harness.NewEnvWith(t, "postgres", "iceberg", "duckdb")
	lakeSettings := fmt.Sprintf(`{"catalog": {"warehouse": %q}, "namespace": "lake"}`, filepath.Join(e.Dir, "lake"))
	config := func(paused bool) {
		e.WriteConfig(fmt.Sprintf(`connections:
  src:
    plugin: postgres
    version: "~> 0.1"
    settings:
      host: %[1]s
      port: %[2]d
      user: postgres
      database: %[3]s
      sslmode: disable
      tables: [public.types, public.odd]
      slot: matrix
      publication: matrix
      on_unrepresentable: null_and_record
  lake:
    plugin: iceberg
    version: "~> 0.1"
    settings: %[4]s
pipelines:
  matrix:
    source: src
    destinations: [lake]
    apply: { paused: %[6]v }
    wal:
      url: file://%[5]s
`, db.Server.Host, db.Server.Port, db.Name, lakeSettings, filepath.Join(e.Dir, "wal"), paused))
	}
	config(false)
	e.MustRun("sync", "--once") // the snapshot

	// The same values through the stream: as inserts, then as updates of every column of those rows.
	db.InsertTypeMatrix(t, "types", 100)
	insertOdd(100)
	db.Exec(t, `UPDATE types SET c_int2 = c_int2 WHERE id >= 100; UPDATE odd SET note = note WHERE id >= 100`)
	e.MustRun("sync", "--once")

	pg := db.Connect(t)
	want := expectedMatrix(ctx, t, pg)
	if len(want) != 2*rows {
		t.Fatalf("source has %d rows, want %d", len(want), 2*rows)
	}
	kinds := map[string]string{"id": "int32", "_skippr_meta": "utf8"}
	for _, c := range pgtest.TypeMatrix {
		kinds[c.Col] = c.Arrow
	}

	// iceberg-go: the plugin's scan prints Arrow's JSON form of each value.
	scan := harness.PluginRows(t, "iceberg", "scan", lakeSettings, "public.types", "the lake table", func(_ []byte, row map[string]any) string {
		return fmt.Sprint(row["id"])
	})
	compareMatrix(t, "iceberg-go scan", readerScan, kinds, want, scan)

	queryRows := func(format string) map[string]map[string]any {
		r := e.MustRun("query", "--format", format, "SELECT * FROM lake.\"public.types\" ORDER BY id")
		return parseQuery(t, format, r.Stdout)
	}
	compareMatrix(t, "skippr query --format json", readerJSON, kinds, want, queryRows("json"))
	compareMatrix(t, "skippr query --format csv", readerCSV, kinds, want, queryRows("csv"))

	// The WAL leg: with apply paused, rows streamed since are only in the WAL, which skippr query merges
	// (written to Parquet by the query plugin, not by the lake): the same values, checked the same way.
	config(true)
	syncCtx, stopSync := context.WithCancel(ctx)
	sync := e.Cmd(syncCtx, "sync")
	if err := sync.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stopSync(); sync.Wait() }()
	db.InsertTypeMatrix(t, "types", 200)
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		r := e.Run("query", "--format", "csv", `SELECT count(*) AS n FROM lake."public.types"`)
		if r.Code == 0 && r.Stdout == fmt.Sprintf("n\n%d\n", 3*rows) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the WAL's rows did not show in skippr query within 2 minutes: exit %d, %q\n%s", r.Code, r.Stdout, r.Stderr)
		}
	}
	if r := e.MustRun("query", "--format", "csv", "--as-of-lake", `SELECT count(*) AS n FROM lake."public.types"`); r.Stdout != fmt.Sprintf("n\n%d\n", 2*rows) {
		t.Fatalf("the lake alone holds %q; the rows from id 200 must be only in the WAL", r.Stdout)
	}
	want = expectedMatrix(ctx, t, pg)
	compareMatrix(t, "skippr query --format json (lake + WAL)", readerJSON, kinds, want, queryRows("json"))
	compareMatrix(t, "skippr query --format csv (lake + WAL)", readerCSV, kinds, want, queryRows("csv"))
	// And through skippr serve's Flight SQL: the Arrow batches the query engine made, as a client gets them.
	srv := startServe(t, ctx, e)
	compareMatrix(t, "skippr serve, Flight SQL (lake + WAL)", readerScan, kinds, want, flightMatrixRows(t, ctx, srv.Addr, `SELECT * FROM lake."public.types" ORDER BY id`))

	// The values Arrow cannot hold: NULL (the 2-D array, NaN, the timestamp) or the elements without their
	// bounds, and the record of each in _skippr_meta.
	oddKinds := map[string]string{"id": "int32", "n": "decimal(10, 2)", "ts": "timestamp[us]", "grid": "list<element: int32, nullable>",
		"lb": "list<element: int32, nullable>", "note": "utf8", "_skippr_meta": "utf8"}
	wantOdd := map[string]map[string]string{}
	for _, base := range []int{0, 100} {
		wantOdd[fmt.Sprint(base)] = map[string]string{"id": fmt.Sprint(base), "n": "NULL", "ts": "NULL", "grid": "NULL", "lb": `["7","8","9"]`, "note": "ünïcödé", "_skippr_meta": "recorded"}
		wantOdd[fmt.Sprint(base+1)] = map[string]string{"id": fmt.Sprint(base + 1), "n": "25/2", "ts": "1704067200000000", "grid": `["5","6"]`, "lb": "[]", "note": "NULL", "_skippr_meta": "NULL"}
	}
	oddScan := harness.PluginRows(t, "iceberg", "scan", lakeSettings, "public.odd", "the lake table", func(_ []byte, row map[string]any) string {
		return fmt.Sprint(row["id"])
	})
	for reader, got := range map[string]map[string]map[string]any{
		readerScan: oddScan,
		readerJSON: parseQuery(t, "json", e.MustRun("query", "--format", "json", "SELECT * FROM lake.\"public.odd\"").Stdout),
		readerCSV:  parseQuery(t, "csv", e.MustRun("query", "--format", "csv", "SELECT * FROM lake.\"public.odd\"").Stdout),
	} {
		compareMatrix(t, reader+" (odd)", reader, oddKinds, wantOdd, got)
		for _, id := range []string{"0", "100"} {
			meta := fmt.Sprint(got[id]["_skippr_meta"])
			for _, w := range []string{`"column":"n"`, `"value":"NaN"`, `"column":"ts"`, `"value":"294276-12-31 23:59:59"`, `"column":"grid"`, `"value":"{{1,2},{3,4}}"`, `"column":"lb"`, `"value":"[0:2]={7,8,9}"`} {
				if !strings.Contains(meta, w) {
					t.Errorf("%s: odd row %s: _skippr_meta %s lacks %s", reader, id, meta, w)
				}
			}
		}
	}
}

// The readers, whose forms of a value differ.
const (
	readerPG   = "postgres"
	readerScan = "iceberg-go scan"
	readerJSON = "json"
	readerCSV  = "csv"
	// A warehouse's rows as testkit's stand-ins give them (PostgreSQL's to_jsonb of their storage) or as
	// harness.SnowflakeLive.Rows gives them in the same forms: a BINARY is "\x" and hex.
	readerWarehouse = "warehouse"
	// BigQuery's TO_JSON_STRING (harness.BigQueryLive.Rows): BYTES are base64.
	readerBigQueryLive = "bigquery TO_JSON_STRING"
)

// expectedMatrix reads the types table from PostgreSQL as text in the session settings the source uses; a
// list is a JSON array of its elements' texts. _skippr_meta is NULL: nothing in the matrix is unrepresentable.
func expectedMatrix(ctx context.Context, t *testing.T, pg *pgx.Conn) map[string]map[string]string {
	t.Helper()
	kinds := map[string]string{"id": "int32"}
	for _, c := range pgtest.TypeMatrix {
		kinds[c.Col] = c.Arrow
	}
	return expectedRows(ctx, t, pg, "types", pgtest.TypeMatrix, kinds)
}

// expectedRows is expectedMatrix of a table with the columns cols after its key id, each brought to the
// canonical form of its kind in kinds.
func expectedRows(ctx context.Context, t *testing.T, pg *pgx.Conn, table string, cols []pgtest.TypeCase, kinds map[string]string) map[string]map[string]string {
	t.Helper()
	for _, set := range []string{"DateStyle=ISO", "IntervalStyle=iso_8601", "TimeZone=UTC", "extra_float_digits=3", "bytea_output=hex"} {
		k, v, _ := strings.Cut(set, "=")
		if _, err := pg.Exec(ctx, "SELECT set_config($1, $2, false)", k, v); err != nil {
			t.Fatal(err)
		}
	}
	exprs := []string{"id::text"}
	names := []string{"id"}
	for _, c := range cols {
		col := pgx.Identifier{c.Col}.Sanitize()
		if strings.HasPrefix(c.Arrow, "list<") {
			exprs = append(exprs, fmt.Sprintf(`CASE WHEN %[1]s IS NULL THEN NULL ELSE coalesce((SELECT json_agg(CASE WHEN e IS NOT NULL THEN format('%%s', e) END ORDER BY i) FROM unnest(%[1]s) WITH ORDINALITY AS u(e, i)), '[]')::text END`, col))
		} else {
			exprs = append(exprs, "CASE WHEN "+col+" IS NOT NULL THEN format('%s', "+col+") END") // the output function: char(n) keeps its padding, inet its form
		}
		names = append(names, c.Col)
	}
	rows, err := pg.Query(ctx, "SELECT "+strings.Join(exprs, ", ")+" FROM "+pgx.Identifier{table}.Sanitize()+" ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]map[string]string{}
	for rows.Next() {
		vals := make([]*string, len(names))
		ptrs := make([]any, len(names))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		row := map[string]string{"_skippr_meta": "NULL"}
		for i, n := range names {
			row[n] = "NULL"
			if vals[i] != nil {
				row[n] = *vals[i]
			}
		}
		out[row["id"]] = row
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	// Canonical forms of PostgreSQL's texts.
	for _, row := range out {
		for col, v := range row {
			if v == "NULL" || col == "_skippr_meta" {
				continue
			}
			kind := kinds[col]
			if strings.HasPrefix(kind, "list<") {
				var elems []*string
				if err := json.Unmarshal([]byte(v), &elems); err != nil {
					t.Fatalf("%s %s: %v", col, v, err)
				}
				items := make([]any, len(elems))
				for i, el := range elems {
					if el != nil {
						items[i] = *el
					}
				}
				row[col] = canonList(t, readerPG, elemKind(kind), items)
				continue
			}
			row[col] = canon(t, readerPG, kind, v)
		}
	}
	return out
}

// compareMatrix compares a reader's rows (by id) with the canonical expected rows, value by value.
func compareMatrix(t *testing.T, what, reader string, kinds map[string]string, want map[string]map[string]string, got map[string]map[string]any) {
	t.Helper()
	compared := 0
	defer func() { t.Logf("%s: %d values compared", what, compared) }()
	if len(got) != len(want) {
		t.Errorf("%s: %d rows, want %d", what, len(got), len(want))
	}
	bad := 0
	ids := make([]string, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		w := want[id]
		g, ok := got[id]
		if !ok {
			t.Errorf("%s: row %s is missing", what, id)
			continue
		}
		for col, wv := range w {
			gv, present := g[col]
			if !present {
				t.Errorf("%s: row %s has no column %s", what, id, col)
				bad++
				continue
			}
			var cv string
			kind := kinds[col]
			switch {
			case col == "_skippr_meta" && wv == "recorded":
				cv = "recorded" // its content is checked by the caller
				if gv == nil || gv == "" {
					cv = "NULL"
				}
			case gv == nil || (reader == readerCSV && gv == "" && !csvEmptyIsValue(kind)):
				cv = "NULL"
			case strings.HasPrefix(kind, "list<"):
				cv = canonList(t, reader, elemKind(kind), gv)
			default:
				cv = canon(t, reader, kind, gv)
			}
			compared++
			if cv != wv {
				bad++
				if bad <= 40 {
					t.Errorf("%s: row %s column %s (%s): got %v (canonical %s), PostgreSQL has %s", what, id, col, kind, gv, cv, wv)
				}
			}
		}
	}
	if bad > 40 {
		t.Errorf("%s: %d values differ in all", what, bad)
	}
}

// csvEmptyIsValue: DuckDB's CSV writes NULL as an empty field and quotes an empty string, which
// encoding/csv cannot tell apart; parseQuery keeps NULL as nil by reading the quotes itself.
func csvEmptyIsValue(string) bool { return true }

func elemKind(list string) string {
	k := strings.TrimPrefix(list, "list<element: ")
	return strings.TrimSuffix(k, ", nullable>")
}

// parseQuery reads skippr query's json (one object per line) or csv output into rows by id. In csv an
// unquoted empty field is NULL and a quoted one the empty string, as DuckDB writes them.
func parseQuery(t *testing.T, format, out string) map[string]map[string]any {
	t.Helper()
	rows := map[string]map[string]any{}
	switch format {
	case "json":
		dec := json.NewDecoder(strings.NewReader(out))
		dec.UseNumber()
		for dec.More() {
			var row map[string]any
			if err := dec.Decode(&row); err != nil {
				t.Fatalf("query json: %v\n%s", err, out)
			}
			rows[fmt.Sprint(row["id"])] = row
		}
	case "csv":
		recs, nulls := readCSV(t, out)
		for i, rec := range recs[1:] {
			row := map[string]any{}
			for j, name := range recs[0] {
				if nulls[i+1][j] {
					row[name] = nil
				} else {
					row[name] = rec[j]
				}
			}
			rows[fmt.Sprint(row["id"])] = row
		}
	}
	return rows
}

// readCSV parses RFC 4180 text and reports which fields were empty and unquoted (NULL in DuckDB's CSV).
func readCSV(t *testing.T, s string) ([][]string, [][]bool) {
	t.Helper()
	r := csv.NewReader(strings.NewReader(s))
	r.FieldsPerRecord = -1
	recs, err := r.ReadAll()
	if err != nil {
		t.Fatalf("query csv: %v", err)
	}
	// A second pass over the raw text finds the unquoted empty fields.
	var nulls [][]bool
	var cur []bool
	field, quoted, inQuotes := 0, false, false
	start := true
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case inQuotes:
			if c == '"' {
				if i+1 < len(s) && s[i+1] == '"' {
					i++
				} else {
					inQuotes = false
				}
			}
			continue
		case c == '"' && start:
			inQuotes, quoted, start = true, true, false
			continue
		case c == ',' || c == '\n':
			cur = append(cur, start && !quoted)
			field++
			quoted, start = false, true
			if c == '\n' {
				nulls = append(nulls, cur)
				cur, field = nil, 0
			}
			continue
		case c == '\r':
			continue
		}
		start = false
	}
	if len(nulls) != len(recs) {
		t.Fatalf("query csv: %d records but %d lines", len(recs), len(nulls))
	}
	return recs, nulls
}

// canonList is a list's canonical form: a JSON array of its elements' canonical forms, null for NULL.
func canonList(t *testing.T, reader, kind string, v any) string {
	t.Helper()
	var items []any
	switch x := v.(type) {
	case []any:
		items = x
	case string: // csv: DuckDB's list text
		items = duckList(t, x)
	default:
		t.Fatalf("%s: list value %#v", reader, v)
	}
	out := make([]*string, len(items))
	for i, it := range items {
		if it == nil {
			continue
		}
		s := canon(t, reader, kind, it)
		out[i] = &s
	}
	b, _ := json.Marshal(out)
	return string(b)
}

// duckList splits DuckDB's text of a list ([1, NULL, 3], ['a,b', NULL, 'NULL']) into its elements.
func duckList(t *testing.T, s string) []any {
	t.Helper()
	if !strings.HasPrefix(s, "[") || !strings.HasSuffix(s, "]") {
		t.Fatalf("list text %q", s)
	}
	s = s[1 : len(s)-1]
	var items []any
	if s == "" {
		return []any{}
	}
	for len(s) > 0 {
		if s[0] == '\'' {
			var b strings.Builder
			i := 1
			for ; i < len(s); i++ {
				if s[i] == '\'' {
					if i+1 < len(s) && s[i+1] == '\'' {
						b.WriteByte('\'')
						i++
						continue
					}
					break
				}
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				b.WriteByte(s[i])
			}
			items = append(items, b.String())
			s = strings.TrimPrefix(s[i+1:], ", ")
			continue
		}
		item, rest, _ := strings.Cut(s, ", ")
		if item == "NULL" {
			items = append(items, nil)
		} else {
			items = append(items, item)
		}
		s = rest
	}
	return items
}

var (
	reDate      = regexp.MustCompile(`^(-?\d+)-(\d\d)-(\d\d)( \(BC\)| BC)?$`)
	reTimestamp = regexp.MustCompile(`^(-?\d+)-(\d\d)-(\d\d)( \(BC\))?[ T](\d\d):(\d\d):(\d\d)(\.\d+)?(Z|[+-]\d\d(?::?\d\d)?)?( BC)?$`)
	reTime      = regexp.MustCompile(`^(\d\d):(\d\d):(\d\d)(\.\d+)?$`)
	reISOIntvl  = regexp.MustCompile(`^P(?:(-?\d+)Y)?(?:(-?\d+)M)?(?:(-?\d+)D)?(?:T(?:(-?\d+)H)?(?:(-?\d+)M)?(?:(-?\d+(?:\.\d+)?)S)?)?$`)
)

// canon brings one value, as a reader gives it, to the canonical form of its Arrow type.
func canon(t *testing.T, reader, kind string, v any) string {
	t.Helper()
	s, isString := v.(string)
	if n, ok := v.(json.Number); ok {
		s, isString = n.String(), true
	}
	fail := func(err any) string {
		t.Errorf("%s: %s value %#v: %v", reader, kind, v, err)
		return fmt.Sprintf("unreadable %#v", v)
	}
	switch {
	case kind == "bool":
		switch fmt.Sprint(v) {
		case "t", "true":
			return "true"
		case "f", "false":
			return "false"
		}
		return fail("not a boolean")
	case kind == "int16" || kind == "int32" || kind == "int64":
		if !isString {
			return fail("not a number")
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fail(err)
		}
		return strconv.FormatInt(n, 10)
	case kind == "float32" || kind == "float64":
		bits := 64
		if kind == "float32" {
			bits = 32
		}
		if f, ok := v.(float64); ok {
			s = strconv.FormatFloat(f, 'g', -1, 64)
		}
		f, err := strconv.ParseFloat(strings.NewReplacer("Infinity", "Inf", "infinity", "Inf").Replace(s), bits)
		if err != nil {
			return fail(err)
		}
		if math.IsNaN(f) {
			return "NaN"
		}
		if math.Signbit(f) && f == 0 {
			return "-0"
		}
		return strconv.FormatFloat(f, 'g', -1, bits)
	case strings.HasPrefix(kind, "decimal("):
		r, ok := new(big.Rat).SetString(s)
		if !isString || !ok {
			return fail("not a decimal")
		}
		return r.RatString()
	case kind == "binary":
		var b []byte
		var err error
		switch {
		case reader == readerPG || reader == readerWarehouse:
			b, err = hex.DecodeString(strings.TrimPrefix(s, `\x`))
		case reader == readerScan || reader == readerBigQueryLive:
			b, err = base64.StdEncoding.DecodeString(s)
		default: // DuckDB's BLOB text: printable ASCII as itself, other bytes as \xHH
			b, err = duckBlob(s)
		}
		if err != nil {
			return fail(err)
		}
		return hex.EncodeToString(b)
	case kind == "fixed_size_binary[16]": // uuid
		if b, err := hex.DecodeString(strings.TrimPrefix(s, `\x`)); err == nil && reader == readerWarehouse && len(b) == 16 {
			s = fmt.Sprintf("%x-%x-%x-%x-%x", b[:4], b[4:6], b[6:8], b[8:10], b[10:]) // Snowflake's BINARY
		}
		if reader == readerScan || reader == readerWarehouse {
			if b, err := base64.StdEncoding.DecodeString(s); err == nil && len(b) == 16 {
				s = fmt.Sprintf("%x-%x-%x-%x-%x", b[:4], b[4:6], b[6:8], b[8:10], b[10:])
			}
		}
		return strings.ToLower(s)
	case kind == "date32":
		switch s {
		case "infinity":
			return "inf"
		case "-infinity":
			return "-inf"
		}
		m := reDate.FindStringSubmatch(s)
		if m == nil {
			return fail("not a date")
		}
		days := civilDays(t, m[1], m[2], m[3], m[4] != "")
		switch days {
		case math.MaxInt32:
			return "inf"
		case -math.MaxInt32:
			return "-inf"
		}
		return strconv.FormatInt(days, 10)
	case kind == "time64[us]":
		m := reTime.FindStringSubmatch(s)
		if m == nil {
			return fail("not a time")
		}
		us := (atoi(t, m[1])*3600+atoi(t, m[2])*60+atoi(t, m[3]))*1e6 + fraction(m[4], 6)
		return strconv.FormatInt(us, 10)
	case strings.HasPrefix(kind, "timestamp["):
		if us, err := strconv.ParseInt(s, 10, 64); err == nil && reader == readerScan {
			// Arrow's JSON form of a timestamp past year 9999 or before year 1: the microseconds.
			s = "@" + strconv.FormatInt(us, 10)
		}
		switch s {
		case "infinity":
			return "inf"
		case "-infinity":
			return "-inf"
		}
		var us *big.Int
		if n, ok := strings.CutPrefix(s, "@"); ok {
			us, _ = new(big.Int).SetString(n, 10)
		} else if m := reTimestamp.FindStringSubmatch(s); m == nil {
			return fail("not a timestamp")
		} else {
			days := civilDays(t, m[1], m[2], m[3], m[4] != "" || m[10] != "")
			us = new(big.Int).Mul(big.NewInt(days), big.NewInt(86400e6))
			us.Add(us, big.NewInt((atoi(t, m[5])*3600+atoi(t, m[6])*60+atoi(t, m[7]))*1e6+fraction(m[8], 6)))
			if off := strings.TrimPrefix(m[9], "Z"); off != "" && strings.Trim(off[1:], "0:") != "" {
				return fail("offset other than UTC")
			}
		}
		switch {
		case us.Cmp(big.NewInt(math.MaxInt64)) == 0:
			return "inf"
		case us.Cmp(big.NewInt(-math.MaxInt64)) == 0:
			return "-inf"
		}
		return us.String()
	case kind == "month_day_nano_interval":
		var months, days, nanos int64
		switch x := v.(type) {
		case map[string]any: // Iceberg's struct<months, days, nanoseconds>
			months, days, nanos = num(t, x["months"]), num(t, x["days"]), num(t, x["nanoseconds"])
		case string:
			if m := reISOIntvl.FindStringSubmatch(x); m != nil {
				months = atoi(t, m[1])*12 + atoi(t, m[2])
				days = atoi(t, m[3])
				secs, frac, _ := strings.Cut(m[6], ".")
				ns := atoi(t, secs)*1e9 + fraction("."+frac, 9)
				if strings.HasPrefix(secs, "-") {
					ns = atoi(t, secs)*1e9 - fraction("."+frac, 9)
				}
				nanos = (atoi(t, m[4])*3600+atoi(t, m[5])*60)*1e9 + ns
			} else if st := map[string]json.Number{}; json.Unmarshal([]byte(strings.ReplaceAll(x, "'", `"`)), &st) == nil {
				// DuckDB's text of the struct: {'months': 14, 'days': 3, 'nanoseconds': 14706789000000}
				months, days, nanos = atoi(t, st["months"].String()), atoi(t, st["days"].String()), atoi(t, st["nanoseconds"].String())
			} else {
				return fail("not an interval")
			}
		default:
			return fail("not an interval")
		}
		return fmt.Sprintf("%d months %d days %d ns", months, days, nanos)
	case kind == "json": // BigQuery's JSON column: compared as JSON, keys sorted, numbers as written
		var x any
		if isString && reader == readerPG {
			d := json.NewDecoder(strings.NewReader(s))
			d.UseNumber()
			if err := d.Decode(&x); err != nil {
				return fail(err)
			}
		} else {
			x = v
		}
		b, err := json.Marshal(x)
		if err != nil {
			return fail(err)
		}
		return string(b)
	case kind == "utf8":
		if !isString {
			b, err := json.Marshal(v)
			if err != nil {
				return fail(err)
			}
			return "json " + string(b)
		}
		return s
	}
	return fail("no canonical form for this type")
}

func duckBlob(s string) ([]byte, error) {
	var b []byte
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && (s[i+1] == 'x' || s[i+1] == 'X') {
			v, err := strconv.ParseUint(s[i+2:i+4], 16, 8)
			if err != nil {
				return nil, err
			}
			b = append(b, byte(v))
			i += 3
			continue
		}
		b = append(b, s[i])
	}
	return b, nil
}

// civilDays is the day number since 1970-01-01 of a proleptic Gregorian date; bc years count back from 1 BC
// (year 0 in astronomical numbering).
func civilDays(t *testing.T, year, month, day string, bc bool) int64 {
	t.Helper()
	y, m, d := atoi(t, year), atoi(t, month), atoi(t, day)
	if bc {
		y = 1 - y
	}
	// Howard Hinnant's days_from_civil.
	if m <= 2 {
		y--
	}
	era := y / 400
	if y < 0 && y%400 != 0 {
		era = (y - 399) / 400
	}
	yoe := y - era*400
	mp := (m + 9) % 12
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}

func atoi(t *testing.T, s string) int64 {
	t.Helper()
	if s == "" {
		return 0
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("number %q: %v", s, err)
	}
	return n
}

// fraction turns ".5" into 5×10^(digits-1): the fraction in units of 10^-digits.
func fraction(f string, digits int) int64 {
	f = strings.TrimPrefix(f, ".")
	if f == "" {
		return 0
	}
	f = (f + strings.Repeat("0", digits))[:digits]
	n, _ := strconv.ParseInt(f, 10, 64)
	return n
}

func num(t *testing.T, v any) int64 {
	t.Helper()
	switch x := v.(type) {
	case json.Number:
		return atoi(t, x.String())
	case float64:
		return int64(x)
	case string:
		return atoi(t, x)
	}
	t.Fatalf("number %#v", v)
	return 0
}
