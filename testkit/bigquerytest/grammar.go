package bigquerytest

import (
	"fmt"
	"strings"
	"unicode"

	bq "google.golang.org/api/bigquery/v2"
)

// The grammar below is the part of GoogleSQL the BigQuery plugin may emit, written down from BigQuery's
// reference pages (cloud.google.com/bigquery/docs/reference/standard-sql/…):
//
//	script      := stmt { ";" stmt } [";"]                              -- procedural language: a script
//	stmt        := "BEGIN" "TRANSACTION" | "COMMIT" "TRANSACTION"       -- transactions
//	             | "SELECT" "IF" "(" "(" scalar_sel ")" "=" param "," int "," "ERROR" "(" string ")" ")"
//	                                                                      -- conditional expressions: IF; ERROR
//	             | "DELETE" "FROM" table "WHERE" ( "TRUE" | cond )       -- DML: DELETE (WHERE is required)
//	             | "UPDATE" table "SET" ident "=" "CAST" "(" param "AS" type ")" "WHERE" ident "IS" "NULL"
//	                                                                      -- DML: UPDATE; conversion functions: CAST
//	             | "SELECT" "SAFE_CAST" "(" param "AS" type ")" "IS" "NOT" "NULL" "AS" ident
//	                                                                      -- conversion functions: SAFE_CAST
//	             | "INSERT" "INTO" table "(" idents ")" "SELECT" exprs "FROM" ( table | latest "AS" alias )
//	             | "MERGE" [ "INTO" ] table [ "AS" ] alias "USING" source [ "AS" ] alias "ON" cond { when }
//	             | "SELECT" idents "FROM" table "WHERE" ident "=" param
//	             | "ALTER" "TABLE" table "RENAME" "COLUMN" ident "TO" ident   -- DDL: ALTER TABLE RENAME COLUMN
//	             | "ALTER" "TABLE" table "RENAME" "TO" ident                  -- DDL: ALTER TABLE RENAME TO (a name, not a path)
//	             | "DECLARE" ident "TIMESTAMP" "DEFAULT" "CURRENT_TIMESTAMP" "(" ")"   -- procedural: DECLARE, first
//	scalar_sel  := "SELECT" "COALESCE" "(" "MAX" "(" ident ")" "," int ")" "FROM" table "WHERE" cond
//	source      := table | latest | "(" "SELECT" item { "," item } "FROM" "UNNEST" "(" param ")" [ "AS" ] alias ")"
//	item        := param "AS" ident | ident
//	when        := "WHEN" "MATCHED" [ "AND" cond ] "THEN" ( "DELETE" | "UPDATE" "SET" ident "=" expr { "," ident "=" expr } )
//	             | "WHEN" "NOT" "MATCHED" [ "BY" "TARGET" ] [ "AND" cond ] "THEN" "INSERT" "(" idents ")" "VALUES" "(" exprs ")"
//	cond        := comparison { "AND" comparison }
//	comparison  := expr ( "=" | "<>" | "!=" ) expr
//	latest      := "(" "SELECT" "*" "FROM" table "WHERE" ( "TRUE" | ident ) "QUALIFY" "ROW_NUMBER" "(" ")" "OVER"
//	               "(" "PARTITION" "BY" idents "ORDER" "BY" ident "DESC" ")" "=" "1" ")"
//	expr        := column | param | int | string | "TRUE" | "FALSE" | "CURRENT_TIMESTAMP" "(" ")" | variable
//	column      := [ alias "." ] ident
//	table       := ident "." ident "." ident                            -- project.dataset.table
//	type        := "INT64" | "FLOAT64" | "NUMERIC" | "BIGNUMERIC" | "BOOL" | "STRING" | "BYTES" | "DATE" | "TIME"
//	             | "DATETIME" | "TIMESTAMP"                              -- data types (scalar, unparameterised)
//	ident       := quoted (`…`, with \` and \\ escapes) | unquoted (letters, digits, _, not a reserved keyword)
//	string      := '…' (with backslash escapes)                          -- "…" is a string in GoogleSQL too,
//	                                                                      -- but the plugin never writes one
//
// A transaction takes queries and DML only (multi-statement transactions, "Statements supported in
// transactions"), so the fence check is a SELECT whose IF reaches ERROR() only when the fence differs.
//
// Rules BigQuery states and this checks: a MERGE has at least one WHEN clause, at most one unconditional
// WHEN MATCHED and it comes last among them, and NOT MATCHED BY SOURCE is left out (PostgreSQL 15, which runs
// the statements, lacks it). Anything else — another statement, a PostgreSQL-only form (ON CONFLICT, INSERT OR
// REPLACE, "quoted" identifiers, BEGIN without TRANSACTION), a reserved word as a name — is refused with the
// error BigQuery would give: "Syntax error: …".

// reserved are GoogleSQL's reserved keywords (lexical structure, "Reserved keywords").
var reserved = map[string]bool{}

func init() {
	for _, k := range strings.Fields(`ALL AND ANY ARRAY AS ASC ASSERT_ROWS_MODIFIED AT BETWEEN BY CASE CAST COLLATE CONTAINS
		CREATE CROSS CUBE CURRENT DEFAULT DEFINE DESC DISTINCT ELSE END ENUM ESCAPE EXCEPT EXCLUDE EXISTS EXTRACT FALSE
		FETCH FOLLOWING FOR FROM FULL GROUP GROUPING GROUPS HASH HAVING IF IGNORE IN INNER INTERSECT INTERVAL INTO IS
		JOIN LATERAL LEFT LIKE LIMIT LOOKUP MERGE NATURAL NEW NO NOT NULL NULLS OF ON OR ORDER OUTER OVER PARTITION
		PRECEDING PROTO QUALIFY RANGE RECURSIVE RESPECT RIGHT ROLLUP ROWS SELECT SET SOME STRUCT TABLESAMPLE THEN TO
		TREAT TRUE UNBOUNDED UNION UNNEST USING WHEN WHERE WINDOW WITH WITHIN`) {
		reserved[k] = true
	}
}

type tokKind int

const (
	tWord   tokKind = iota // unquoted identifier or keyword
	tQuoted                // `identifier`
	tString                // 'string'
	tInt
	tParam // @name
	tPunct
	tEOF
)

type token struct {
	kind tokKind
	text string // unescaped for quoted identifiers and strings
	pos  int
}

func lex(src string) ([]token, error) {
	var out []token
	i := 0
	for i < len(src) {
		c := src[i]
		switch {
		case c == ' ' || c == '\n' || c == '\t' || c == '\r':
			i++
		case c == '`' || c == '\'':
			var b strings.Builder
			j := i + 1
			for ; j < len(src) && src[j] != c; j++ {
				if src[j] == '\\' && j+1 < len(src) {
					j++
					switch src[j] {
					case 'n':
						b.WriteByte('\n')
					case 't':
						b.WriteByte('\t')
					default:
						b.WriteByte(src[j])
					}
					continue
				}
				if src[j] == '\n' {
					return nil, fmt.Errorf("Syntax error: Unclosed %s at [%d]", map[byte]string{'`': "identifier literal", '\'': "string literal"}[c], i)
				}
				b.WriteByte(src[j])
			}
			if j >= len(src) {
				return nil, fmt.Errorf("Syntax error: Unclosed %s at [%d]", map[byte]string{'`': "identifier literal", '\'': "string literal"}[c], i)
			}
			k := tString
			if c == '`' {
				k = tQuoted
				if b.Len() == 0 {
					return nil, fmt.Errorf("Syntax error: Invalid empty identifier at [%d]", i)
				}
			}
			out = append(out, token{kind: k, text: b.String(), pos: i})
			i = j + 1
		case c == '"':
			return nil, fmt.Errorf("Syntax error: the plugin's grammar has no double-quoted strings (a PostgreSQL identifier?) at [%d]", i)
		case c == '@':
			j := i + 1
			for j < len(src) && isWordByte(src[j]) {
				j++
			}
			if j == i+1 {
				return nil, fmt.Errorf("Syntax error: Unexpected \"@\" at [%d]", i)
			}
			out = append(out, token{kind: tParam, text: src[i+1 : j], pos: i})
			i = j
		case c >= '0' && c <= '9':
			j := i
			for j < len(src) && src[j] >= '0' && src[j] <= '9' {
				j++
			}
			out = append(out, token{kind: tInt, text: src[i:j], pos: i})
			i = j
		case isWordByte(c):
			j := i
			for j < len(src) && isWordByte(src[j]) {
				j++
			}
			out = append(out, token{kind: tWord, text: src[i:j], pos: i})
			i = j
		case c == '<' && i+1 < len(src) && src[i+1] == '>', c == '!' && i+1 < len(src) && src[i+1] == '=':
			out = append(out, token{kind: tPunct, text: "<>", pos: i})
			i += 2
		case strings.IndexByte("(),.=;*", c) >= 0:
			out = append(out, token{kind: tPunct, text: string(c), pos: i})
			i++
		default:
			return nil, fmt.Errorf("Syntax error: Unexpected character %q at [%d]", c, i)
		}
	}
	return append(out, token{kind: tEOF, pos: len(src)}), nil
}

func isWordByte(c byte) bool {
	return c == '_' || unicode.IsLetter(rune(c)) || (c >= '0' && c <= '9')
}

// Kind is a statement's shape.
type Kind string

const (
	KindBegin  Kind = "BEGIN TRANSACTION"
	KindCommit Kind = "COMMIT TRANSACTION"
	KindAssert Kind = "ASSERT"
	KindDelete Kind = "DELETE"
	KindInsert Kind = "INSERT"
	KindMerge  Kind = "MERGE"
	KindSelect Kind = "SELECT"
	KindRename Kind = "ALTER_TABLE"
	// KindRenameTable is ALTER TABLE t RENAME TO name; Columns holds the new name.
	KindRenameTable Kind = "ALTER_TABLE_RENAME_TO"
	KindDeclare     Kind = "DECLARE"
	KindUpdate      Kind = "UPDATE"
	// KindCanCast is SELECT SAFE_CAST(@p AS type) IS NOT NULL AS name; Postgres holds the CAST, which the
	// executor runs and answers false for where PostgreSQL raises a data exception.
	KindCanCast Kind = "SAFE_CAST"
	varPrefix        = "$var:" // a parameter placeholder naming a script variable rather than a query parameter
	paramPrefix      = "\x00param:"
)

// Statement is one parsed statement and its PostgreSQL translation, with parameters marked as
// paramPrefix+name+"\x00" for the executor to number.
type Statement struct {
	Kind     Kind
	Postgres string
	// Tables names the tables the statement reads or writes (dataset.table); Columns the selected columns of
	// a SELECT.
	Tables  []TableRef
	Columns []string
	Message string // an ASSERT's description
}

// TableRef is a table a statement names.
type TableRef struct{ Project, Dataset, Table string }

// Parse splits a script into statements and checks each against the grammar.
func Parse(script string) ([]Statement, error) {
	toks, err := lex(script)
	if err != nil {
		return nil, err
	}
	p := &parser{toks: toks, vars: map[string]bool{}}
	var out []Statement
	for p.peek().kind != tEOF {
		st, err := p.statement()
		if err != nil {
			return nil, err
		}
		if st.Kind == KindDeclare && len(out) > 0 && out[len(out)-1].Kind != KindDeclare {
			// "DECLARE … must be at the start of a script or block, before any other statement" (procedural
			// language, DECLARE).
			return nil, fmt.Errorf("Syntax error: Variable declarations are allowed only at the start of a block or script")
		}
		out = append(out, st)
		if p.peek().kind == tEOF {
			break
		}
		if err := p.punct(";"); err != nil {
			return nil, err
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("Syntax error: Unexpected end of script")
	}
	return out, nil
}

type parser struct {
	toks []token
	i    int
	vars map[string]bool // the script's declared variables, by upper-cased name
	out  strings.Builder
	st   Statement
}

func (p *parser) peek() token { return p.toks[p.i] }
func (p *parser) next() token { t := p.toks[p.i]; p.i++; return t }

func (p *parser) errf(format string, args ...any) error {
	t := p.peek()
	what := "end of script"
	if t.kind != tEOF {
		what = fmt.Sprintf("%q", t.text)
	}
	return fmt.Errorf("Syntax error: Unexpected %s at [%d]: %s", what, t.pos, fmt.Sprintf(format, args...))
}

// isKW says whether the next token is the keyword kw (keywords are case-insensitive).
func (p *parser) isKW(kw string) bool {
	t := p.peek()
	return t.kind == tWord && strings.EqualFold(t.text, kw)
}

func (p *parser) kw(words ...string) error {
	for _, w := range words {
		if !p.isKW(w) {
			return p.errf("expected keyword %s", w)
		}
		p.next()
		p.emit(w)
	}
	return nil
}

func (p *parser) punct(s string) error {
	t := p.peek()
	if t.kind != tPunct || t.text != s {
		return p.errf("expected %q", s)
	}
	p.next()
	return nil
}

func (p *parser) emit(s string) {
	if p.out.Len() > 0 {
		p.out.WriteByte(' ')
	}
	p.out.WriteString(s)
}

func pgIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// ident reads a name: quoted, or unquoted and not reserved.
func (p *parser) ident() (string, error) {
	t := p.peek()
	switch {
	case t.kind == tQuoted:
		p.next()
		return t.text, nil
	case t.kind == tWord && !reserved[strings.ToUpper(t.text)] && !(t.text[0] >= '0' && t.text[0] <= '9'):
		p.next()
		return t.text, nil
	case t.kind == tWord:
		return "", p.errf("%s is a reserved keyword; quote it with backticks to use it as a name", t.text)
	}
	return "", p.errf("expected a name")
}

func (p *parser) table() error {
	var parts []string
	for {
		n, err := p.ident()
		if err != nil {
			return err
		}
		parts = append(parts, n)
		if t := p.peek(); t.kind != tPunct || t.text != "." {
			break
		}
		p.next()
	}
	if len(parts) != 3 {
		return p.errf("the plugin names tables as project.dataset.table, got %d parts", len(parts))
	}
	p.st.Tables = append(p.st.Tables, TableRef{parts[0], parts[1], parts[2]})
	p.emit(pgIdent(parts[1]) + "." + pgIdent(parts[2]))
	return nil
}

func (p *parser) idents() ([]string, error) {
	var out []string
	for {
		n, err := p.ident()
		if err != nil {
			return nil, err
		}
		out = append(out, n)
		if t := p.peek(); t.kind != tPunct || t.text != "," {
			return out, nil
		}
		p.next()
	}
}

func quoteAll(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = pgIdent(n)
	}
	return strings.Join(q, ", ")
}

func (p *parser) param() error {
	t := p.peek()
	if t.kind != tParam {
		return p.errf("expected a query parameter")
	}
	p.next()
	p.emit(paramPrefix + t.text + "\x00")
	return nil
}

// expr := column | param | int | string | "TRUE" | "FALSE" | "CURRENT_TIMESTAMP" "(" ")"
func (p *parser) expr() error {
	t := p.peek()
	if t.kind == tWord && (strings.EqualFold(t.text, "TRUE") || strings.EqualFold(t.text, "FALSE")) {
		p.next()
		p.emit(strings.ToUpper(t.text))
		return nil
	}
	if t.kind == tWord && strings.EqualFold(t.text, "CURRENT_TIMESTAMP") {
		// "CURRENT_TIMESTAMP: … The current timestamp value is set at the start of the query statement that
		// contains this function" (timestamp functions): PostgreSQL's statement_timestamp(), not now(), which
		// is the transaction's start.
		p.next()
		if err := p.punct("("); err != nil {
			return err
		}
		if err := p.punct(")"); err != nil {
			return err
		}
		p.emit("statement_timestamp()")
		return nil
	}
	switch t.kind {
	case tParam:
		return p.param()
	case tInt:
		p.next()
		p.emit(t.text)
		return nil
	case tString:
		p.next()
		p.emit("'" + strings.ReplaceAll(t.text, "'", "''") + "'")
		return nil
	}
	n, err := p.ident()
	if err != nil {
		return err
	}
	if t := p.peek(); t.kind == tPunct && t.text == "." {
		p.next()
		c, err := p.ident()
		if err != nil {
			return err
		}
		p.emit(pgIdent(n) + "." + pgIdent(c))
		return nil
	}
	if p.vars[strings.ToUpper(n)] {
		// A script variable (names are case-insensitive); the plugin's tables have no column of that name.
		p.emit(paramPrefix + varPrefix + strings.ToUpper(n) + "\x00")
		return nil
	}
	p.emit(pgIdent(n))
	return nil
}

// declare reads DECLARE name TIMESTAMP DEFAULT CURRENT_TIMESTAMP(): the one variable the plugin declares, the
// time of its transaction's script, read by every statement after it. Columns holds the name; the executor
// evaluates the default once (statement_timestamp() of its own statement).
func (p *parser) declare() error {
	if err := p.kw("DECLARE"); err != nil {
		return err
	}
	n, err := p.ident()
	if err != nil {
		return err
	}
	if err := p.kw("TIMESTAMP", "DEFAULT"); err != nil {
		return err
	}
	p.out.Reset()
	if err := p.expr(); err != nil {
		return err
	}
	if p.out.String() != "statement_timestamp()" {
		return p.errf("the plugin declares a variable with DEFAULT CURRENT_TIMESTAMP() only")
	}
	p.out.Reset()
	p.out.WriteString("SELECT statement_timestamp()")
	p.vars[strings.ToUpper(n)] = true
	p.st.Columns = []string{strings.ToUpper(n)}
	return nil
}

func (p *parser) cond() error {
	for {
		if err := p.expr(); err != nil {
			return err
		}
		t := p.peek()
		if t.kind != tPunct || (t.text != "=" && t.text != "<>") {
			return p.errf("expected a comparison")
		}
		p.next()
		p.emit(t.text)
		if err := p.expr(); err != nil {
			return err
		}
		if !p.isKW("AND") {
			return nil
		}
		p.next()
		p.emit("AND")
	}
}

func (p *parser) alias() (string, error) {
	if p.isKW("AS") {
		p.next()
	}
	n, err := p.ident()
	if err != nil {
		return "", err
	}
	p.emit("AS " + pgIdent(n))
	return n, nil
}

func (p *parser) statement() (Statement, error) {
	p.out.Reset()
	p.st = Statement{}
	t := p.peek()
	if t.kind != tWord {
		return p.st, p.errf("expected a statement")
	}
	var err error
	switch strings.ToUpper(t.text) {
	case "BEGIN":
		p.st.Kind = KindBegin
		err = p.kw("BEGIN", "TRANSACTION")
	case "COMMIT":
		p.st.Kind = KindCommit
		err = p.kw("COMMIT", "TRANSACTION")
	case "DECLARE":
		p.st.Kind = KindDeclare
		err = p.declare()
	case "ALTER":
		p.st.Kind = KindRename
		err = p.rename()
	case "DELETE":
		p.st.Kind = KindDelete
		err = p.del()
	case "UPDATE":
		p.st.Kind = KindUpdate
		err = p.update()
	case "INSERT":
		p.st.Kind = KindInsert
		err = p.insert()
	case "MERGE":
		p.st.Kind = KindMerge
		err = p.merge()
	case "SELECT":
		if n := p.toks[p.i+1]; n.kind == tWord && strings.EqualFold(n.text, "IF") {
			err = p.assert()
			break
		}
		if n := p.toks[p.i+1]; n.kind == tWord && strings.EqualFold(n.text, "SAFE_CAST") {
			p.st.Kind = KindCanCast
			err = p.canCast()
			break
		}
		p.st.Kind = KindSelect
		err = p.sel()
	default:
		err = p.errf("not a statement the plugin may emit")
	}
	if err != nil {
		return p.st, err
	}
	if t := p.peek(); t.kind != tEOF && !(t.kind == tPunct && t.text == ";") {
		return p.st, p.errf("expected end of statement")
	}
	p.st.Postgres = p.out.String()
	return p.st, nil
}

// assert reads SELECT IF((scalar_sel) = @param, int, ERROR('message')) and translates it to the comparison
// alone; the executor raises the message when it is false.
func (p *parser) assert() error {
	p.st.Kind = KindAssert
	p.next() // SELECT
	p.next() // IF
	for _, s := range []string{"(", "("} {
		if err := p.punct(s); err != nil {
			return err
		}
	}
	p.emit("SELECT (")
	if err := p.kw("SELECT", "COALESCE"); err != nil {
		return err
	}
	if err := p.punct("("); err != nil {
		return err
	}
	p.out.WriteString("(")
	if !p.isKW("MAX") {
		return p.errf("expected MAX")
	}
	p.next()
	if err := p.punct("("); err != nil {
		return err
	}
	col, err := p.ident()
	if err != nil {
		return err
	}
	p.out.WriteString("MAX(" + pgIdent(col) + ")")
	if err := p.punct(")"); err != nil {
		return err
	}
	if err := p.punct(","); err != nil {
		return err
	}
	t := p.peek()
	if t.kind != tInt {
		return p.errf("expected an integer")
	}
	p.next()
	p.out.WriteString(", " + t.text + ")")
	if err := p.punct(")"); err != nil {
		return err
	}
	if err := p.kw("FROM"); err != nil {
		return err
	}
	if err := p.table(); err != nil {
		return err
	}
	if err := p.kw("WHERE"); err != nil {
		return err
	}
	if err := p.cond(); err != nil {
		return err
	}
	if err := p.punct(")"); err != nil {
		return err
	}
	if err := p.punct("="); err != nil {
		return err
	}
	p.emit(") =")
	if err := p.param(); err != nil {
		return err
	}
	if err := p.punct(","); err != nil {
		return err
	}
	if t := p.peek(); t.kind != tInt {
		return p.errf("expected an integer")
	}
	p.next()
	if err := p.punct(","); err != nil {
		return err
	}
	if !p.isKW("ERROR") {
		return p.errf("expected ERROR")
	}
	p.next()
	if err := p.punct("("); err != nil {
		return err
	}
	t = p.peek()
	if t.kind != tString {
		return p.errf("ERROR takes a string literal")
	}
	p.next()
	p.st.Message = t.text
	if err := p.punct(")"); err != nil {
		return err
	}
	return p.punct(")")
}

// rename reads ALTER TABLE t RENAME COLUMN a TO b (Columns holds a and b) or ALTER TABLE t RENAME TO n
// (KindRenameTable; Columns holds n).
func (p *parser) rename() error {
	if err := p.kw("ALTER", "TABLE"); err != nil {
		return err
	}
	if err := p.table(); err != nil {
		return err
	}
	if err := p.kw("RENAME"); err != nil {
		return err
	}
	if p.isKW("TO") {
		p.next()
		to, err := p.ident()
		if err != nil {
			return err
		}
		p.emit("TO " + pgIdent(to))
		p.st.Kind = KindRenameTable
		p.st.Columns = []string{to}
		return nil
	}
	if err := p.kw("COLUMN"); err != nil {
		return err
	}
	from, err := p.ident()
	if err != nil {
		return err
	}
	p.emit(pgIdent(from))
	if err := p.kw("TO"); err != nil {
		return err
	}
	to, err := p.ident()
	if err != nil {
		return err
	}
	p.emit(pgIdent(to))
	p.st.Columns = []string{from, to}
	return nil
}

func (p *parser) del() error {
	if err := p.kw("DELETE", "FROM"); err != nil {
		return err
	}
	if err := p.table(); err != nil {
		return err
	}
	if err := p.kw("WHERE"); err != nil {
		return err
	}
	if p.isKW("TRUE") {
		return p.kw("TRUE")
	}
	return p.cond()
}

// scalarTypes are the types a CAST may name, with the PostgreSQL type the stand-in stores each in (pgType).
var scalarTypes = map[string]bool{"INT64": true, "FLOAT64": true, "NUMERIC": true, "BIGNUMERIC": true, "BOOL": true,
	"STRING": true, "BYTES": true, "DATE": true, "TIME": true, "DATETIME": true, "TIMESTAMP": true}

// cast reads "(" param "AS" type ")" and emits it as PostgreSQL's CAST.
func (p *parser) cast() error {
	if err := p.punct("("); err != nil {
		return err
	}
	p.emit("CAST(")
	if err := p.param(); err != nil {
		return err
	}
	if err := p.kw("AS"); err != nil {
		return err
	}
	t := p.peek()
	if t.kind != tWord || !scalarTypes[strings.ToUpper(t.text)] {
		return p.errf("expected a scalar type")
	}
	p.next()
	pg, err := pgType(&bq.TableFieldSchema{Type: strings.ToUpper(t.text)})
	if err != nil {
		return err
	}
	p.emit(pg)
	if err := p.punct(")"); err != nil {
		return err
	}
	p.emit(")")
	return nil
}

func (p *parser) update() error {
	if err := p.kw("UPDATE"); err != nil {
		return err
	}
	if err := p.table(); err != nil {
		return err
	}
	if err := p.kw("SET"); err != nil {
		return err
	}
	c, err := p.ident()
	if err != nil {
		return err
	}
	p.emit(pgIdent(c))
	if err := p.punct("="); err != nil {
		return err
	}
	p.emit("=")
	if !p.isKW("CAST") {
		return p.errf("expected CAST")
	}
	p.next()
	if err := p.cast(); err != nil {
		return err
	}
	if err := p.kw("WHERE"); err != nil {
		return err
	}
	w, err := p.ident()
	if err != nil {
		return err
	}
	p.emit(pgIdent(w))
	return p.kw("IS", "NULL")
}

func (p *parser) canCast() error {
	p.next() // SELECT
	p.next() // SAFE_CAST
	p.emit("SELECT")
	if err := p.cast(); err != nil {
		return err
	}
	if err := p.kw("IS", "NOT", "NULL", "AS"); err != nil {
		return err
	}
	n, err := p.ident()
	if err != nil {
		return err
	}
	p.emit(pgIdent(n))
	p.st.Columns = []string{n}
	return nil
}

func (p *parser) insert() error {
	if err := p.kw("INSERT", "INTO"); err != nil {
		return err
	}
	if err := p.table(); err != nil {
		return err
	}
	cols, err := p.columnList()
	if err != nil {
		return err
	}
	if err := p.kw("SELECT"); err != nil {
		return err
	}
	for n := 0; ; n++ {
		if n > 0 {
			p.out.WriteString(",")
		}
		if err := p.expr(); err != nil {
			return err
		}
		if t := p.peek(); t.kind != tPunct || t.text != "," {
			if n+1 != len(cols) {
				return fmt.Errorf("Inserted row has wrong column count; Has %d, expected %d", n+1, len(cols))
			}
			break
		}
		p.next()
	}
	if err := p.kw("FROM"); err != nil {
		return err
	}
	// A staging table written through the at-least-once default stream is read once per ordinal: the
	// newest-row subquery the MERGE uses, partitioned by the ordinal column.
	if t := p.peek(); t.kind == tPunct && t.text == "(" {
		if err := p.latestRows(); err != nil {
			return err
		}
		if err := p.kw("AS"); err != nil {
			return err
		}
		n, err := p.ident()
		if err != nil {
			return err
		}
		p.emit(pgIdent(n))
		return nil
	}
	return p.table()
}

func (p *parser) sel() error {
	if err := p.kw("SELECT"); err != nil {
		return err
	}
	cols, err := p.idents()
	if err != nil {
		return err
	}
	p.st.Columns = cols
	p.emit(quoteAll(cols))
	if err := p.kw("FROM"); err != nil {
		return err
	}
	if err := p.table(); err != nil {
		return err
	}
	if err := p.kw("WHERE"); err != nil {
		return err
	}
	c, err := p.ident()
	if err != nil {
		return err
	}
	p.emit(pgIdent(c))
	if err := p.punct("="); err != nil {
		return err
	}
	p.emit("=")
	return p.param()
}

func (p *parser) merge() error {
	p.next()
	p.emit("MERGE INTO")
	if p.isKW("INTO") {
		p.next()
	}
	if err := p.table(); err != nil {
		return err
	}
	if _, err := p.alias(); err != nil {
		return err
	}
	if err := p.kw("USING"); err != nil {
		return err
	}
	if t := p.peek(); t.kind == tPunct && t.text == "(" && p.toks[p.i+2].kind == tPunct && p.toks[p.i+2].text == "*" {
		if err := p.latestRows(); err != nil {
			return err
		}
	} else if t.kind == tPunct && t.text == "(" {
		p.next()
		p.emit("(")
		if err := p.kw("SELECT"); err != nil {
			return err
		}
		for n := 0; ; n++ {
			if n > 0 {
				if err := p.punct(","); err != nil {
					return err
				}
				p.out.WriteString(",")
			}
			if p.peek().kind == tParam {
				if err := p.param(); err != nil {
					return err
				}
				if err := p.kw("AS"); err != nil {
					return err
				}
				c, err := p.ident()
				if err != nil {
					return err
				}
				p.emit(pgIdent(c))
			} else {
				c, err := p.ident()
				if err != nil {
					return err
				}
				p.emit(pgIdent(c))
			}
			if p.isKW("FROM") {
				break
			}
		}
		if err := p.kw("FROM", "UNNEST"); err != nil {
			return err
		}
		if err := p.punct("("); err != nil {
			return err
		}
		p.out.WriteString("(")
		if err := p.param(); err != nil {
			return err
		}
		if err := p.punct(")"); err != nil {
			return err
		}
		p.out.WriteString(")")
		if _, err := p.alias(); err != nil {
			return err
		}
		if err := p.punct(")"); err != nil {
			return err
		}
		p.emit(")")
	} else if err := p.table(); err != nil {
		return err
	}
	if _, err := p.alias(); err != nil {
		return err
	}
	if err := p.kw("ON"); err != nil {
		return err
	}
	if err := p.cond(); err != nil {
		return err
	}
	whens, unconditionalMatched := 0, false
	for p.isKW("WHEN") {
		whens++
		if err := p.kw("WHEN"); err != nil {
			return err
		}
		notMatched := false
		if p.isKW("NOT") {
			notMatched = true
			p.next()
			p.emit("NOT")
		}
		if err := p.kw("MATCHED"); err != nil {
			return err
		}
		if notMatched && p.isKW("BY") {
			p.next()
			if p.isKW("SOURCE") {
				return p.errf("WHEN NOT MATCHED BY SOURCE is outside the plugin's grammar")
			}
			if !p.isKW("TARGET") {
				return p.errf("expected TARGET")
			}
			p.next() // PostgreSQL 15 knows only the short form
		}
		conditional := false
		if p.isKW("AND") {
			conditional = true
			p.next()
			p.emit("AND")
			if err := p.cond(); err != nil {
				return err
			}
		}
		if !notMatched {
			if unconditionalMatched {
				return fmt.Errorf("Syntax error: a WHEN MATCHED clause after an unconditional WHEN MATCHED clause is unreachable")
			}
			unconditionalMatched = !conditional
		}
		if err := p.kw("THEN"); err != nil {
			return err
		}
		switch {
		case !notMatched && p.isKW("DELETE"):
			p.next()
			p.emit("DELETE")
		case !notMatched && p.isKW("UPDATE"):
			if err := p.kw("UPDATE", "SET"); err != nil {
				return err
			}
			for n := 0; ; n++ {
				if n > 0 {
					p.out.WriteString(",")
				}
				c, err := p.ident()
				if err != nil {
					return err
				}
				p.emit(pgIdent(c) + " =")
				if err := p.punct("="); err != nil {
					return err
				}
				if err := p.expr(); err != nil {
					return err
				}
				if t := p.peek(); t.kind != tPunct || t.text != "," {
					break
				}
				p.next()
			}
		case notMatched && p.isKW("INSERT"):
			if err := p.kw("INSERT"); err != nil {
				return err
			}
			cols, err := p.columnList()
			if err != nil {
				return err
			}
			if err := p.kw("VALUES"); err != nil {
				return err
			}
			if err := p.punct("("); err != nil {
				return err
			}
			p.emit("(")
			for n := 0; ; n++ {
				if n > 0 {
					p.out.WriteString(",")
				}
				if err := p.expr(); err != nil {
					return err
				}
				if t := p.peek(); t.kind != tPunct || t.text != "," {
					break
				}
				p.next()
			}
			if n := strings.Count(p.out.String()[strings.LastIndex(p.out.String(), "VALUES"):], ",") + 1; n != len(cols) {
				return fmt.Errorf("Syntax error: INSERT has %d columns and %d values", len(cols), n)
			}
			if err := p.punct(")"); err != nil {
				return err
			}
			p.emit(")")
		default:
			return p.errf("expected DELETE, UPDATE or INSERT")
		}
	}
	if whens == 0 {
		return p.errf("a MERGE needs at least one WHEN clause")
	}
	return nil
}

// latestRows reads the one subquery form the plugin's data MERGE uses, the newest staged row per key:
//
//	(SELECT * FROM table WHERE TRUE QUALIFY ROW_NUMBER() OVER (PARTITION BY c, … ORDER BY c DESC) = 1)
//
// (QUALIFY, "Query syntax"; BigQuery once required a WHERE beside it, hence WHERE TRUE). PostgreSQL 15 has no
// QUALIFY: it becomes a window in a derived table filtered outside.
func (p *parser) latestRows() error {
	p.next() // (
	head := p.out.String()
	if err := p.kw("SELECT"); err != nil {
		return err
	}
	if err := p.punct("*"); err != nil {
		return err
	}
	if err := p.kw("FROM"); err != nil {
		return err
	}
	mark := p.out.Len()
	if err := p.table(); err != nil {
		return err
	}
	table := strings.TrimSpace(p.out.String()[mark:])
	if err := p.kw("WHERE"); err != nil {
		return err
	}
	filter := ""
	if p.isKW("TRUE") {
		p.next()
	} else {
		// WHERE of a BOOL column: the rows the window ranks (WHERE comes before QUALIFY).
		c, err := p.ident()
		if err != nil {
			return err
		}
		filter = " WHERE " + pgIdent(c)
	}
	for _, w := range []string{"QUALIFY", "ROW_NUMBER"} {
		if err := p.kw(w); err != nil {
			return err
		}
	}
	if err := p.punct("("); err != nil {
		return err
	}
	if err := p.punct(")"); err != nil {
		return err
	}
	if err := p.kw("OVER"); err != nil {
		return err
	}
	if err := p.punct("("); err != nil {
		return err
	}
	if err := p.kw("PARTITION", "BY"); err != nil {
		return err
	}
	part, err := p.idents()
	if err != nil {
		return err
	}
	if err := p.kw("ORDER", "BY"); err != nil {
		return err
	}
	ord, err := p.ident()
	if err != nil {
		return err
	}
	if err := p.kw("DESC"); err != nil {
		return err
	}
	if err := p.punct(")"); err != nil {
		return err
	}
	if err := p.punct("="); err != nil {
		return err
	}
	if t := p.next(); t.kind != tInt || t.text != "1" {
		return p.errf("the plugin keeps ROW_NUMBER() = 1 only")
	}
	if err := p.punct(")"); err != nil {
		return err
	}
	p.out.Reset()
	p.out.WriteString(head)
	p.emit(fmt.Sprintf(`(SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY %s ORDER BY %s DESC) AS "_skippr_rn" FROM %s%s) AS "_skippr_q" WHERE "_skippr_rn" = 1)`,
		quoteAll(part), pgIdent(ord), table, filter))
	return nil
}

// columnList reads "(a, b, …)" and emits it with every name quoted; it returns the names.
func (p *parser) columnList() ([]string, error) {
	if err := p.punct("("); err != nil {
		return nil, err
	}
	cols, err := p.idents()
	if err != nil {
		return nil, err
	}
	if err := p.punct(")"); err != nil {
		return nil, err
	}
	p.emit("(" + quoteAll(cols) + ")")
	return cols, nil
}
