package snowflaketest

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

const (
	typeSelect = 0x1000
	typeDML    = 0x3000
	typeOther  = 0x6000
)

func words(toks []token, n int) string {
	var w []string
	for i := 0; i < n && i < len(toks); i++ {
		w = append(w, strings.ToUpper(toks[i].text))
	}
	return strings.Join(w, " ")
}

func one(col, v string) *result {
	return &result{typeID: typeSelect, columns: []string{col}, rows: [][]*string{{&v}}}
}

// run executes one allowed statement in the session.
func (s *Server) run(ctx context.Context, x *session, stmt string, args []any) (*result, error) {
	toks, err := lex(stmt)
	if err != nil {
		return nil, &sfError{code: 1003, state: "42000", msg: err.Error()}
	}
	head := words(toks, 2)
	switch {
	case head == "BEGIN TRANSACTION" || stmt == "BEGIN" || stmt == "COMMIT" || stmt == "ROLLBACK":
		begin := toks[0].text == "BEGIN"
		if begin && x.inTx || !begin && !x.inTx {
			return &result{typeID: typeOther}, nil
		}
		verb := stmt
		if begin {
			verb = "BEGIN"
		}
		if _, err := x.conn.Exec(ctx, verb); err != nil {
			return nil, err
		}
		x.inTx = begin
		name := ""
		if len(toks) == 4 {
			name = toks[3].text
		}
		s.setTx(x, begin, name)
		return &result{typeID: typeOther}, nil
	case stmt == "SELECT CURRENT_SESSION()":
		return one("CURRENT_SESSION()", strconv.FormatInt(x.id, 10)), nil
	case stmt == "SHOW TRANSACTIONS":
		return s.showTransactions(x), nil
	case strings.HasPrefix(stmt, "SELECT SYSTEM$ABORT_TRANSACTION("):
		return s.abortTransaction(ctx, x, strings.TrimSuffix(strings.TrimPrefix(stmt, "SELECT SYSTEM$ABORT_TRANSACTION("), ")"))
	case stmt == "SELECT 1":
		return one("1", "1"), nil
	case stmt == "SELECT CURRENT_ROLE()":
		return one("CURRENT_ROLE()", s.opt.Role), nil
	case toks[0].text == "USE":
		return s.use(toks)
	case strings.ToUpper(toks[0].text) == "PUT":
		return s.put(toks)
	case toks[0].text == "REMOVE":
		dir, _, err := s.stageOf(toks[1:])
		if err != nil {
			return nil, err
		}
		f := toks[len(toks)-1].text
		if err := os.Remove(filepath.Join(dir, f)); err != nil && !os.IsNotExist(err) {
			return nil, err
		}
		return &result{typeID: typeOther}, nil
	case head == "COPY INTO":
		return s.copyInto(ctx, x, toks)
	case strings.Contains(stmt, `"INFORMATION_SCHEMA"."COLUMNS"`):
		return s.columns(ctx, args)
	case head == "CREATE TABLE" || head == "CREATE OR" || head == "ALTER TABLE":
		return s.ddl(ctx, x, toks)
	case strings.HasPrefix(stmt, "SELECT TRY_CAST("):
		return s.tryCast(ctx, x, toks, args)
	}
	q, err := s.translate(toks)
	if err != nil {
		return nil, err
	}
	if toks[0].text == "SELECT" {
		rows, err := x.conn.Query(ctx, q, append([]any{pgx.QueryExecModeSimpleProtocol}, args...)...)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		res := &result{typeID: typeSelect}
		for _, f := range rows.FieldDescriptions() {
			res.columns = append(res.columns, f.Name)
		}
		for rows.Next() {
			raw := rows.RawValues()
			row := make([]*string, len(raw))
			for i, v := range raw {
				if v != nil {
					t := string(v)
					row[i] = &t
				}
			}
			res.rows = append(res.rows, row)
		}
		return res, rows.Err()
	}
	if strings.ToUpper(toks[0].text) == "MERGE" || toks[0].text == "INSERT" || toks[0].text == "DELETE" {
		if err := s.tableExists(ctx, toks); err != nil {
			return nil, err
		}
	}
	tag, err := x.conn.Exec(ctx, q, append([]any{pgx.QueryExecModeSimpleProtocol}, args...)...)
	if err != nil {
		return nil, err
	}
	n := strconv.FormatInt(tag.RowsAffected(), 10)
	return &result{typeID: typeDML, columns: []string{"number of rows affected"}, rows: [][]*string{{&n}}}, nil
}

// tableExists answers for the target of a DML statement the way Snowflake does when it is missing.
func (s *Server) tableExists(ctx context.Context, toks []token) error {
	for i := 0; i+4 < len(toks); i++ {
		if toks[i].kind == 'q' && toks[i+2].kind == 'q' && toks[i+4].kind == 'q' && toks[i+1].text == "." && toks[i+3].text == "." {
			if strings.HasPrefix(toks[i+4].text, stagePrefix) {
				return nil
			}
			var n int
			if err := s.tableCount(ctx, toks[i+2].text, toks[i+4].text, &n); err != nil {
				return err
			}
			if n == 0 {
				return &sfError{code: 2003, state: "42S02", msg: fmt.Sprintf("SQL compilation error:\nObject '%s.%s.%s' does not exist or not authorized.", toks[i].text, toks[i+2].text, toks[i+4].text)}
			}
			return nil
		}
	}
	return nil
}

func (s *Server) use(toks []token) (*result, error) {
	kind := strings.ToUpper(toks[1].text)
	name := toks[len(toks)-1].text
	missing := func(what string) error {
		return &sfError{code: 2043, state: "02000", msg: fmt.Sprintf("SQL compilation error:\nObject does not exist, or operation cannot be performed. (%s %s)", what, name)}
	}
	switch kind {
	case "WAREHOUSE":
		if name != s.opt.Warehouse || s.revoked("USAGE ON WAREHOUSE") {
			return nil, missing("warehouse")
		}
	case "DATABASE":
		if name != s.opt.Database || s.revoked("USAGE ON DATABASE") {
			return nil, missing("database")
		}
	case "SCHEMA":
		if toks[2].text != s.opt.Database || s.revoked("USAGE ON DATABASE") {
			return nil, missing("database")
		}
		if name != s.opt.Schema || s.revoked("USAGE ON SCHEMA") {
			return nil, missing("schema")
		}
	}
	return &result{typeID: typeOther}, nil
}

// stageOf reads a table stage reference @"DB"."SCHEMA".%"TABLE"/skippr/ and returns its directory and table.
func (s *Server) stageOf(toks []token) (string, string, error) {
	// @ q . q . % q / skippr /
	if len(toks) < 8 || toks[0].text != "@" || toks[5].text != "%" {
		return "", "", &sfError{code: 1003, state: "42000", msg: "stand-in: bad stage reference"}
	}
	db, schema, table := toks[1].text, toks[3].text, toks[6].text
	if db != s.opt.Database || schema != s.opt.Schema {
		return "", "", &sfError{code: 2003, state: "02000", msg: fmt.Sprintf("SQL compilation error:\nStage '%s.%s.%%%s' does not exist or not authorized.", db, schema, table)}
	}
	var n int
	if err := s.tableCount(context.Background(), schema, table, &n); err != nil {
		return "", "", err
	}
	if n == 0 {
		return "", "", &sfError{code: 2003, state: "02000", msg: fmt.Sprintf("SQL compilation error:\nStage '%s.%s.%%%s' does not exist or not authorized.", db, schema, table)}
	}
	return filepath.Join(s.opt.StageDir, schema, table, "skippr"), table, nil
}

// put answers a PUT with the upload instructions gosnowflake follows: a LOCAL_FS stage is a directory the
// driver copies the file into itself.
func (s *Server) put(toks []token) (*result, error) {
	src := strings.TrimPrefix(toks[1].text, "file://")
	dir, _, err := s.stageOf(toks[2:])
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return &result{typeID: typeOther, extra: map[string]any{
		"command": "UPLOAD", "src_locations": []string{src}, "autoCompress": false, "sourceCompression": "none",
		"overwrite": true, "parallel": 1, "threshold": 200 * 1024 * 1024,
		"stageInfo": map[string]any{"locationType": "LOCAL_FS", "location": dir + "/", "path": ""},
	}}, nil
}

// ddl runs CREATE TABLE, CREATE OR REPLACE TEMPORARY TABLE and ALTER TABLE: first committing an open
// transaction, as Snowflake does at every DDL statement, and keeping the declared types in the catalog.
func (s *Server) ddl(ctx context.Context, x *session, toks []token) (*result, error) {
	if x.inTx {
		if _, err := x.conn.Exec(ctx, "COMMIT"); err != nil {
			return nil, err
		}
		x.inTx = false
		s.setTx(x, false, "")
	}
	temp := words(toks, 4) == "CREATE OR REPLACE TEMPORARY"
	if (words(toks, 2) == "CREATE TABLE" || temp) && s.revoked("CREATE TABLE ON SCHEMA") {
		return nil, &sfError{code: 3001, state: "42501", msg: fmt.Sprintf("SQL access control error:\nInsufficient privileges to operate on schema '%s'", s.opt.Schema)}
	}
	// The qualified name follows the keywords.
	var at int
	for at = 0; at < len(toks) && toks[at].kind != 'q'; at++ {
	}
	if at+4 >= len(toks) {
		return nil, &sfError{code: 1003, state: "42000", msg: "stand-in: no table name"}
	}
	schema, table := toks[at+2].text, toks[at+4].text
	if schema != s.opt.Schema {
		return nil, &sfError{code: 2003, state: "02000", msg: fmt.Sprintf("SQL compilation error:\nSchema '%s.%s' does not exist or not authorized.", toks[at].text, schema)}
	}
	q, err := s.translate(toks)
	if err != nil {
		return nil, err
	}
	switch {
	case temp:
		q = strings.Replace(q, "CREATE OR REPLACE TEMPORARY TABLE", "CREATE TEMPORARY TABLE", 1)
		if _, err := x.conn.Exec(ctx, "DROP TABLE IF EXISTS pg_temp."+quote(table)); err != nil {
			return nil, err
		}
		if _, err := x.conn.Exec(ctx, q); err != nil {
			return nil, err
		}
	case words(toks, 2) == "CREATE TABLE":
		var exists int
		if err := s.tableCount(ctx, schema, table, &exists); err != nil {
			return nil, err
		}
		if _, err := x.conn.Exec(ctx, q); err != nil {
			return nil, err
		}
		if exists == 0 {
			// Column definitions: "NAME" TYPE[(p,s)] [NOT NULL], after the name's opening parenthesis.
			for i := at + 6; i < len(toks); i++ {
				if toks[i].kind == 'q' && (toks[i-1].text == "(" || toks[i-1].text == ",") && i+1 < len(toks) && toks[i+1].kind == 'w' {
					if err := s.catalog(ctx, schema, table, toks[i].text, toks[i+1:]); err != nil {
						return nil, err
					}
				}
			}
		}
	case toks[at+5].text == "RENAME" && toks[at+6].text == "TO":
		// ALTER TABLE … RENAME TO "D"."S"."B": the table and its catalog rows. The table stage's directory stays
		// behind: the documentation does not say that a stage's files follow its table, so the stand-in takes the
		// case a client must survive (files PUT before the rename are not in the renamed table's stage).
		if at+11 >= len(toks) || toks[at+9].text != schema {
			return nil, &sfError{code: 1003, state: "42000", msg: "stand-in: RENAME TO another schema"}
		}
		to := toks[at+11].text
		if _, err := x.conn.Exec(ctx, "ALTER TABLE "+quote(schema)+"."+quote(table)+" RENAME TO "+quote(to)); err != nil {
			return nil, err
		}
		if err := s.metaExec(ctx, `UPDATE _standin.columns SET table_name = $3 WHERE schema_name = $1 AND table_name = $2`, schema, table, to); err != nil {
			return nil, err
		}
	case toks[at+5].text == "RENAME": // ALTER TABLE … RENAME COLUMN "A" TO "B": the catalog's row follows, in place.
		if _, err := x.conn.Exec(ctx, q); err != nil {
			return nil, err
		}
		if err := s.metaExec(ctx, `UPDATE _standin.columns SET column_name = $4 WHERE schema_name = $1 AND table_name = $2 AND column_name = $3`,
			schema, table, toks[at+7].text, toks[at+9].text); err != nil {
			return nil, err
		}
	default: // ALTER TABLE … ADD COLUMN "C" T | ALTER COLUMN "C" SET DATA TYPE T
		if _, err := x.conn.Exec(ctx, q); err != nil {
			return nil, err
		}
		for i := at + 5; i < len(toks); i++ {
			if toks[i].kind == 'q' {
				j := i + 1
				for j < len(toks) && toks[j].kind == 'w' && (toks[j].text == "SET" || toks[j].text == "DATA" || toks[j].text == "TYPE") {
					j++
				}
				if err := s.metaExec(ctx, `DELETE FROM _standin.columns WHERE schema_name = $1 AND table_name = $2 AND column_name = $3 AND $4`, schema, table, toks[i].text, toks[at+5].text == "ALTER"); err != nil {
					return nil, err
				}
				if err := s.catalog(ctx, schema, table, toks[i].text, toks[j:]); err != nil {
					return nil, err
				}
				break
			}
		}
	}
	return &result{typeID: typeOther}, nil
}

// catalog records a column's declared type from the tokens of its type.
func (s *Server) catalog(ctx context.Context, schema, table, column string, typ []token) error {
	base := strings.ToUpper(typ[0].text)
	var prec, scale *int
	if base == "NUMBER" && len(typ) >= 6 && typ[1].text == "(" {
		p, _ := strconv.Atoi(typ[2].text)
		sc, _ := strconv.Atoi(typ[4].text)
		prec, scale = &p, &sc
	}
	switch base {
	case "VARCHAR":
		base = "TEXT"
	}
	err := s.metaExec(ctx, `INSERT INTO _standin.columns (schema_name, table_name, column_name, data_type, numeric_precision, numeric_scale)
		VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING`, schema, table, column, base, prec, scale)
	return err
}

func (s *Server) columns(ctx context.Context, args []any) (*result, error) {
	if len(args) != 2 {
		return nil, &sfError{code: 1003, state: "42000", msg: "stand-in: columns query wants 2 bindings"}
	}
	s.metaMu.Lock()
	defer s.metaMu.Unlock()
	rows, err := s.meta.Query(ctx, `SELECT column_name, data_type, numeric_precision::text, numeric_scale::text FROM _standin.columns
		WHERE schema_name = $1 AND table_name = $2 ORDER BY ordinal`, args[0], args[1])
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	res := &result{typeID: typeSelect, columns: []string{"COLUMN_NAME", "DATA_TYPE", "NUMERIC_PRECISION", "NUMERIC_SCALE"}}
	for rows.Next() {
		var name, typ string
		var p, sc *string
		if err := rows.Scan(&name, &typ, &p, &sc); err != nil {
			return nil, err
		}
		res.rows = append(res.rows, []*string{&name, &typ, p, sc})
	}
	return res, rows.Err()
}

// copyInto loads a staged Parquet file into a (staging) table, matching columns by name without regard to
// case (MATCH_BY_COLUMN_NAME = CASE_INSENSITIVE): table columns the file lacks stay NULL, file columns the
// table lacks are ignored. PURGE removes the file once loaded.
func (s *Server) copyInto(ctx context.Context, x *session, toks []token) (*result, error) {
	// COPY INTO q . q . q FROM @ …
	target := toks[6].text
	var from, filesAt int
	for i, t := range toks {
		if t.kind == 'w' && t.text == "FROM" && from == 0 {
			from = i
		}
		if t.kind == 'w' && t.text == "FILES" {
			filesAt = i
		}
	}
	dir, _, err := s.stageOf(toks[from+1:])
	if err != nil {
		return nil, err
	}
	name := toks[filesAt+3].text
	path := filepath.Join(dir, name)
	rel := "pg_temp." + quote(target)
	if !strings.HasPrefix(target, stagePrefix) {
		rel = quote(toks[4].text) + "." + quote(target)
	}
	rows, err := x.conn.Query(ctx, `SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum`, rel)
	if err != nil {
		return nil, err
	}
	type tcol struct{ Name, Type string }
	cols, err := pgx.CollectRows(rows, pgx.RowToStructByPos[tcol])
	if err != nil {
		return nil, err
	}
	opts := readerOptions(toks)
	f, err := os.Open(path)
	if err != nil {
		return nil, &sfError{code: 2003, state: "02000", msg: fmt.Sprintf("Remote file '%s' was not found.", name)}
	}
	defer f.Close()
	pf, err := file.NewParquetReader(f)
	if err != nil {
		return nil, &sfError{code: 100152, state: "22000", msg: fmt.Sprintf("Error parsing the parquet file %s: %v", name, err)}
	}
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
	if err != nil {
		return nil, err
	}
	tbl, err := fr.ReadTable(ctx)
	if err != nil {
		return nil, &sfError{code: 100152, state: "22000", msg: fmt.Sprintf("Error parsing the parquet file %s: %v", name, err)}
	}
	defer tbl.Release()
	var use []string
	var src []arrow.Array
	var reads []read
	for _, c := range cols {
		for i, f := range tbl.Schema().Fields() {
			if strings.EqualFold(f.Name, c.Name) {
				chunks := tbl.Column(i).Data().Chunks()
				a, err := array.Concatenate(chunks, memory.DefaultAllocator)
				if err != nil {
					return nil, err
				}
				defer a.Release()
				use = append(use, quote(c.Name))
				src = append(src, a)
				reads = append(reads, opts.readAs(pf.MetaData().Schema.Column(i), c.Name, c.Type))
			}
		}
	}
	if len(use) == 0 {
		return nil, &sfError{code: 100201, state: "22000", msg: "No columns of the file match the table's by name."}
	}
	var buf bytes.Buffer
	n := int(tbl.NumRows())
	for r := 0; r < n; r++ {
		for j, a := range src {
			if j > 0 {
				buf.WriteByte(',')
			}
			if a.IsNull(r) {
				continue
			}
			v, err := reads[j].value(a, r)
			if err != nil {
				return nil, &sfError{code: err.code, state: err.state, msg: fmt.Sprintf("%s\n  File '%s', line %d, column %s", err.msg, name, r+1, reads[j].column)}
			}
			buf.WriteByte('"')
			buf.WriteString(strings.ReplaceAll(v, `"`, `""`))
			buf.WriteByte('"')
		}
		buf.WriteByte('\n')
	}
	if _, err := x.conn.PgConn().CopyFrom(ctx, &buf, "COPY "+rel+" ("+strings.Join(use, ", ")+") FROM STDIN WITH (FORMAT csv)"); err != nil {
		return nil, err
	}
	f.Close()
	if err := os.Remove(path); err != nil {
		return nil, err
	}
	// gosnowflake sums the first row of a DML result as counts: the rows loaded alone.
	rowsLoaded := strconv.Itoa(n)
	return &result{typeID: typeDML, columns: []string{"rows_loaded"}, rows: [][]*string{{&rowsLoaded}}}, nil
}

// text is a Parquet-loaded value in PostgreSQL's input syntax.
func text(a arrow.Array, i int) string {
	switch v := a.(type) {
	case *array.Boolean:
		return strconv.FormatBool(v.Value(i))
	case *array.Float32:
		return float(float64(v.Value(i)))
	case *array.Float64:
		return float(v.Value(i))
	case *array.Decimal128:
		return v.Value(i).ToString(v.DataType().(*arrow.Decimal128Type).Scale)
	case *array.String:
		return v.Value(i)
	case *array.LargeString:
		return v.Value(i)
	case *array.Binary:
		return `\x` + hex.EncodeToString(v.Value(i))
	case *array.LargeBinary:
		return `\x` + hex.EncodeToString(v.Value(i))
	case *array.FixedSizeBinary:
		return `\x` + hex.EncodeToString(v.Value(i))
	case *array.Date32:
		return v.Value(i).ToTime().Format("2006-01-02")
	case *array.Time32:
		return v.Value(i).ToTime(v.DataType().(*arrow.Time32Type).Unit).Format("15:04:05.999999")
	case *array.Time64:
		return v.Value(i).ToTime(v.DataType().(*arrow.Time64Type).Unit).Format("15:04:05.999999")
	case *array.Timestamp:
		tt := v.DataType().(*arrow.TimestampType)
		t := v.Value(i).ToTime(tt.Unit)
		if tt.TimeZone != "" {
			return t.UTC().Format(time.RFC3339Nano)
		}
		return t.UTC().Format("2006-01-02 15:04:05.999999999")
	}
	return a.ValueStr(i)
}

func float(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// setTx records a session's transaction for SHOW TRANSACTIONS. The record is the server's (under s.mu), not
// the session's: a session whose client died may still have a request in flight, and listing or aborting must
// not wait for it.
func (s *Server) setTx(x *session, open bool, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !open {
		x.txID = 0
		return
	}
	s.nextTx++
	x.txID, x.txName, x.txStarted = 1712345678901000000+s.nextTx, name, time.Now()
}

// showTransactions lists the open transactions of every session (the stand-in has one user), as Snowflake's
// SHOW TRANSACTIONS does for the current user: id, user, session, name, started_on, state, scope.
func (s *Server) showTransactions(_ *session) *result {
	res := &result{typeID: typeSelect, columns: []string{"id", "user", "session", "name", "started_on", "state", "scope"}}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, x := range s.sessions {
		if x.txID != 0 {
			id, sid, started := strconv.FormatInt(x.txID, 10), strconv.FormatInt(x.id, 10), x.txStarted.UTC().Format(time.RFC3339)
			user, name, state, scope := s.opt.User, x.txName, "running", "Session-scoped"
			res.rows = append(res.rows, []*string{&id, &user, &sid, &name, &started, &state, &scope})
		}
	}
	return res
}

// abortTransaction ends another session's open transaction and releases its locks, as
// SYSTEM$ABORT_TRANSACTION does: by terminating that session's PostgreSQL backend (the session may be busy
// with a request its dead client left behind, so its connection cannot be used from here). That session's
// client is gone; a later request of it would fail, where Snowflake would keep the session usable.
func (s *Server) abortTransaction(ctx context.Context, self *session, id string) (*result, error) {
	s.mu.Lock()
	var pid uint32
	for _, x := range s.sessions {
		if x != self && x.txID != 0 && strconv.FormatInt(x.txID, 10) == id {
			pid, x.txID = x.pid, 0
		}
	}
	s.mu.Unlock()
	if pid == 0 {
		return nil, &sfError{code: 2003, state: "02000", msg: "Transaction " + id + " does not exist or not authorized."}
	}
	if err := s.metaExec(ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
		return nil, err
	}
	return one("SYSTEM$ABORT_TRANSACTION", "Transaction "+id+" aborted."), nil
}

// The catalog connection is shared by every session's requests: one at a time.
func (s *Server) tableCount(ctx context.Context, schema, table string, n *int) error {
	s.metaMu.Lock()
	defer s.metaMu.Unlock()
	return s.meta.QueryRow(ctx, `SELECT count(*) FROM _standin.columns WHERE schema_name = $1 AND table_name = $2`, schema, table).Scan(n)
}

func (s *Server) metaExec(ctx context.Context, q string, args ...any) error {
	s.metaMu.Lock()
	defer s.metaMu.Unlock()
	_, err := s.meta.Exec(ctx, q, args...)
	return err
}

// tryCast answers SELECT TRY_CAST(? AS type) IS NOT NULL as Snowflake does (NULL, so false, where CAST would
// fail: docs.snowflake.com/en/sql-reference/functions/try_cast): PostgreSQL's CAST under a savepoint when a
// transaction is open, a data exception (class 22) read as false.
func (s *Server) tryCast(ctx context.Context, x *session, toks []token, args []any) (*result, error) {
	q, err := s.translate(toks)
	if err != nil {
		return nil, err
	}
	q = strings.Replace(q, "TRY_CAST", "CAST", 1)
	if x.inTx {
		if _, err := x.conn.Exec(ctx, "SAVEPOINT try_cast"); err != nil {
			return nil, err
		}
	}
	var ok bool
	err = x.conn.QueryRow(ctx, q, append([]any{pgx.QueryExecModeSimpleProtocol}, args...)...).Scan(&ok)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && strings.HasPrefix(pe.Code, "22") {
		err, ok = nil, false
	}
	if x.inTx {
		verb := "RELEASE SAVEPOINT try_cast"
		if !ok {
			verb = "ROLLBACK TO SAVEPOINT try_cast"
		}
		if _, rerr := x.conn.Exec(ctx, verb); rerr != nil && err == nil {
			err = rerr
		}
	}
	if err != nil {
		return nil, err
	}
	return one("TRY_CAST", strconv.FormatBool(ok)), nil
}
