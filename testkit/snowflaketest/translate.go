package snowflaketest

import (
	"fmt"
	"strconv"
	"strings"
)

// token is a lexical unit of an allowed statement.
type token struct {
	kind byte // 'q' quoted identifier (text unquoted), 's' string literal (text unquoted), 'w' word, '?' parameter, 'p' punctuation
	text string
}

// lex splits an allowed statement; allowed statements have no comments and only single-quoted literals.
func lex(s string) ([]token, error) {
	var out []token
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\n' || c == '\t':
			i++
		case c == '"' || c == '\'':
			var b strings.Builder
			j := i + 1
			for {
				if j >= len(s) {
					return nil, fmt.Errorf("unterminated %c at %d", c, i)
				}
				if s[j] == c {
					if j+1 < len(s) && s[j+1] == c {
						b.WriteByte(c)
						j += 2
						continue
					}
					break
				}
				if c == '\'' && s[j] == '\\' && j+1 < len(s) {
					j++
				}
				b.WriteByte(s[j])
				j++
			}
			kind := byte('q')
			if c == '\'' {
				kind = 's'
			}
			out = append(out, token{kind, b.String()})
			i = j + 1
		case c == '?':
			out = append(out, token{'?', "?"})
			i++
		case c == '_' || c == '$' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9':
			j := i
			for j < len(s) && (s[j] == '_' || s[j] == '$' || s[j] >= 'A' && s[j] <= 'Z' || s[j] >= 'a' && s[j] <= 'z' || s[j] >= '0' && s[j] <= '9') {
				j++
			}
			out = append(out, token{'w', s[i:j]})
			i = j
		case c == '<' && i+1 < len(s) && s[i+1] == '>':
			out = append(out, token{'p', "<>"})
			i += 2
		default:
			out = append(out, token{'p', string(c)})
			i++
		}
	}
	return out, nil
}

func quote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// pgTypes are the PostgreSQL types the stand-in stores Snowflake types in: exact for numbers, text, binary and
// dates; microseconds for times and timestamps (Snowflake keeps nanoseconds); jsonb for the semi-structured
// types.
var pgTypes = map[string]string{
	"NUMBER": "numeric", "VARCHAR": "text", "FLOAT": "double precision", "BINARY": "bytea", "BOOLEAN": "boolean",
	"DATE": "date", "TIME": "time", "TIMESTAMP_NTZ": "timestamp", "TIMESTAMP_TZ": "timestamptz",
	"VARIANT": "jsonb", "OBJECT": "jsonb", "ARRAY": "jsonb",
}

// stagePrefix names the staging tables, which are temporary: PostgreSQL keeps those in the session's own
// schema, so their qualifier goes.
const stagePrefix = "_SKIPPR_STAGE_"

// translate rewrites an allowed statement for PostgreSQL: database.schema.table becomes schema.table (the
// stand-in serves one database), types become their PostgreSQL storage, ? parameters become $n.
func (s *Server) translate(toks []token) (string, error) {
	var b strings.Builder
	param := 0
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		switch t.kind {
		case 'q':
			if i+4 < len(toks) && toks[i+1].text == "." && toks[i+2].kind == 'q' && toks[i+3].text == "." && toks[i+4].kind == 'q' {
				if t.text != s.opt.Database {
					return "", &sfError{code: 2003, state: "02000", msg: fmt.Sprintf("SQL compilation error:\nDatabase '%s' does not exist or not authorized.", t.text)}
				}
				if strings.HasPrefix(toks[i+4].text, stagePrefix) {
					b.WriteString(quote(toks[i+4].text))
				} else {
					b.WriteString(quote(toks[i+2].text) + "." + quote(toks[i+4].text))
				}
				i += 4
				continue
			}
			b.WriteString(quote(t.text))
		case 's':
			b.WriteString("'" + strings.ReplaceAll(t.text, "'", "''") + "'")
		case '?':
			param++
			b.WriteString("$" + strconv.Itoa(param))
		case 'w':
			up := strings.ToUpper(t.text)
			pg, isType := pgTypes[up]
			if !isType {
				b.WriteString(t.text)
				continue
			}
			b.WriteString(pg)
			// TIME(9)/TIMESTAMP_*(9): PostgreSQL keeps microseconds.
			if (up == "TIME" || strings.HasPrefix(up, "TIMESTAMP")) && i+3 < len(toks) && toks[i+1].text == "(" && toks[i+3].text == ")" {
				b.WriteString("(6)")
				i += 3
			}
		default:
			b.WriteString(t.text)
		}
	}
	return b.String(), nil
}

// sfError is an error in Snowflake's response shape.
type sfError struct {
	code  int
	state string
	msg   string
}

func (e *sfError) Error() string { return fmt.Sprintf("%06d (%s): %s", e.code, e.state, e.msg) }
