package source

import (
	"context"
	"fmt"
	"strings"

	"vitess.io/vitess/go/mysql"
	"vitess.io/vitess/go/mysql/binlog"
	"vitess.io/vitess/go/mysql/collations"
	"vitess.io/vitess/go/sqltypes"
	querypb "vitess.io/vitess/go/vt/proto/query"
	"vitess.io/vitess/go/vt/sqlparser"
	"vitess.io/vitess/go/vt/vtenv"
	"vitess.io/vitess/go/vt/vtgate/evalengine"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugins/mysql/config"
)

// Row filters (table_options.<table>.where). MySQL has no server-side filter for the binary log, so the plugin
// applies it with the semantics of PostgreSQL's publication row filters: the snapshot's SELECT has the WHERE
// (the server evaluates it), and each binlog row image is evaluated here with vitess's evalengine, MySQL's
// expression semantics in Go (the same library already decodes the binary log):
//
//   - insert: carried when the new row matches; delete: when the old row matches;
//   - update: both images match → update; the old one only → delete of the old row; the new one only → insert
//     of the new row; neither → nothing.
//
// A NULL result is out (SQL's three-valued logic, as on the server). Text is compared with the default collation
// of the column's character set (evalengine knows MySQL's collations), which is what the server uses unless the
// column declares another collation: a column with, say, utf8mb4_bin compares case-sensitively on the server and
// case-insensitively here. Only the columns the filter names are decoded for it.

// rowFilter is one table's compiled filter.
type rowFilter struct {
	text   string
	expr   evalengine.Expr
	env    *vtenv.Environment
	cols   []int // the table's columns the filter names
	row    []sqltypes.Value
	fields []*querypb.Field
	coll   []collations.ID // per column: the collation text is compared with
}

// volatileFuncs are functions whose value is not a function of the row (MySQL's non-deterministic ones).
var volatileFuncs = map[string]bool{
	"now": true, "sysdate": true, "curdate": true, "current_date": true, "curtime": true, "current_time": true,
	"current_timestamp": true, "localtime": true, "localtimestamp": true, "utc_date": true, "utc_time": true,
	"utc_timestamp": true, "unix_timestamp": true, "rand": true, "uuid": true, "uuid_short": true,
	"connection_id": true, "user": true, "current_user": true, "session_user": true, "system_user": true,
	"database": true, "schema": true, "last_insert_id": true, "found_rows": true, "row_count": true,
	"sleep": true, "benchmark": true, "get_lock": true, "release_lock": true, "is_free_lock": true,
	"is_used_lock": true, "version": true,
}

// compileFilter parses and translates where against t's columns. MariaDB's defaults (utf8mb4_general_ci) are
// MySQL 5.7's, MySQL 8's are utf8mb4_0900_ai_ci: the environment follows the server.
func compileFilter(t *Table, where string, mariaDB bool) (*rowFilter, error) {
	version := "8.0.40"
	if mariaDB {
		version = "5.7.44"
	}
	env, err := vtenv.New(vtenv.Options{MySQLServerVersion: version})
	if err != nil {
		return nil, err
	}
	refuse := func(err error) error {
		return fault.ConfigErr(fmt.Errorf("table_options.%s.where (%s) cannot be a row filter of the table: %w", t.Name, where, err),
			"write it as a MySQL boolean expression over the table's columns, e.g. where: \"region = 'eu'\" (functions that read the clock, the session or other tables are not evaluable per row)")
	}
	ast, err := env.Parser().ParseExpr(where)
	if err != nil {
		return nil, refuse(err)
	}
	// A function whose value depends on when or where it is evaluated would give the snapshot (evaluated by the
	// server, once) and the stream (evaluated here, per row image) different answers: PostgreSQL refuses
	// these in row filters too.
	var volatile string
	_ = sqlparser.Walk(func(n sqlparser.SQLNode) (bool, error) {
		switch n := n.(type) {
		case *sqlparser.CurTimeFuncExpr:
			volatile = n.Name.String()
		case *sqlparser.FuncExpr:
			if volatileFuncs[n.Name.Lowered()] {
				volatile = n.Name.String()
			}
		case *sqlparser.Subquery:
			volatile = "a subquery"
		}
		return volatile == "", nil
	}, ast)
	if volatile != "" {
		return nil, refuse(fmt.Errorf("%s is not allowed: its value is not the row's alone", volatile))
	}
	f := &rowFilter{text: where, env: env, row: make([]sqltypes.Value, len(t.Columns)), fields: make([]*querypb.Field, len(t.Columns)),
		coll: make([]collations.ID, len(t.Columns))}
	ce := env.CollationEnv()
	for i, c := range t.Columns {
		f.row[i] = sqltypes.NULL
		f.coll[i] = collations.CollationBinaryID
		cs := ""
		if i < len(t.def.Columns) {
			cs = strings.ToLower(t.def.Columns[i].Charset)
		}
		if cs != "" && cs != "binary" {
			if id := ce.DefaultCollationForCharset(cs); id != collations.Unknown {
				f.coll[i] = id
			}
		} else if cs == "" && isText(c.Kind) {
			f.coll[i] = ce.DefaultCollationForCharset("utf8mb4")
		}
		f.fields[i] = &querypb.Field{Name: c.Name, Type: sqltypes.Null, Charset: uint32(f.coll[i])}
	}
	resolve := func(n *sqlparser.ColName) (int, error) {
		if !n.Qualifier.IsEmpty() && n.Qualifier.Name.String() != t.Name {
			return 0, fmt.Errorf("column %s names another table", sqlparser.String(n))
		}
		for i, c := range t.Columns {
			if strings.EqualFold(c.Name, n.Name.String()) {
				if !containsInt(f.cols, i) {
					f.cols = append(f.cols, i)
				}
				return i, nil
			}
		}
		return 0, fmt.Errorf("the table has no column %s", n.Name.String())
	}
	f.expr, err = evalengine.Translate(ast, &evalengine.Config{ResolveColumn: resolve, Collation: ce.DefaultConnectionCharset(), Environment: env})
	if err != nil {
		return nil, refuse(err)
	}
	return f, nil
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// isText says whether values of kind k are character strings.
func isText(k Kind) bool { return k == KindString || k == KindEnum || k == KindSet || k == KindJSON }

// match evaluates the filter on one row image of t (binlog cells with their table map's types).
func (f *rowFilter) match(ctx context.Context, t *Table, tm *mysql.TableMap, row []cell) (bool, error) {
	for _, i := range f.cols {
		if row[i].null {
			f.row[i] = sqltypes.NULL
			f.fields[i].Type = sqltypes.Null
			continue
		}
		v, _, err := binlog.CellValue(row[i].b, 0, tm.Types[i], tm.Metadata[i], t.Columns[i].field, false)
		if err != nil {
			return false, fmt.Errorf("table %s column %s: decode binlog value for the row filter: %w", t.Stream, t.Columns[i].Name, err)
		}
		if v.Type() == sqltypes.VarBinary && f.coll[i] != collations.CollationBinaryID {
			v = sqltypes.MakeTrusted(sqltypes.VarChar, v.Raw()) // text the decoder left as bytes
		}
		f.row[i] = v
		f.fields[i].Type = v.Type()
	}
	env := evalengine.NewExpressionEnv(ctx, nil, evalengine.NewEmptyVCursor(f.env, nil))
	env.Row, env.Fields = f.row, f.fields
	res, err := env.Evaluate(f.expr)
	if err != nil {
		return false, fault.DataErr(fmt.Errorf("table %s: evaluate row filter %s: %w", t.Stream, f.text, err),
			"correct table_options where so it evaluates on every row (the server's snapshot evaluated it), or re-snapshot the table after changing it")
	}
	return res.ToBoolean(), nil
}

// filter returns t's compiled row filter, nil when it has none.
func (r *reader) filter(t *Table) (*rowFilter, error) {
	where := r.cfg.Where(t.Name)
	if where == "" {
		return nil, nil
	}
	if f := r.filters[t]; f != nil {
		return f, nil
	}
	f, err := compileFilter(t, where, r.flavor == flavorMariaDB)
	if err != nil {
		return nil, err
	}
	if r.filters == nil {
		r.filters = map[*Table]*rowFilter{}
	}
	r.filters[t] = f
	return f, nil
}

// checkFilter has the server and the evaluator check t's filter at start: the server plans the snapshot's
// query with it (a syntax error, an unknown column or function comes back with the server's reason), and the
// evaluator must be able to translate it for the binary log's rows.
func (r *reader) checkFilter(conn *mysql.Conn, t *Table) error {
	where := r.cfg.Where(t.Name)
	if where == "" {
		return nil
	}
	q := "SELECT 1 FROM " + config.QuoteIdent(r.cfg.Database) + "." + config.QuoteIdent(t.Name) + " WHERE (" + where + ") LIMIT 0"
	if _, err := conn.ExecuteFetch(q, 1, false); err != nil {
		return fault.ConfigErr(fmt.Errorf("table_options.%s.where (%s) cannot be a row filter of the table: the server says: %w", t.Name, where, err),
			"write it as a boolean expression over the table's columns, e.g. where: \"region = 'eu'\"")
	}
	_, err := r.filter(t)
	return err
}

// keep says which of an update's images pass t's filter (both true without a filter).
func (s *streamer) keep(ctx context.Context, t *Table, tm *mysql.TableMap, row []cell) (bool, error) {
	f, err := s.filter(t)
	if err != nil || f == nil {
		return err == nil, err
	}
	return f.match(ctx, t, tm, row)
}
