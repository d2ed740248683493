package queryserve

import (
	"regexp"
	"strings"
)

// A statement asks for `skippr query`'s options with a leading comment: `/* skippr: as_of_lake */ SELECT …`
// (the lake alone, without the WAL's unapplied rows, as --as-of-lake), `/* skippr: include_deleted */` (the
// rows soft deletes flagged too, as --include-deleted), or both: `/* skippr: as_of_lake, include_deleted */`.
// A comment, because Flight SQL has no per-statement options a generic client (ADBC, JDBC, a BI tool) can set
// without custom code, while every client sends the SQL text as written. Only a comment at the very start
// counts (after whitespace), and only when it names nothing but these options, so the same words inside a
// string literal, a later comment or another comment change nothing.
var directiveRE = regexp.MustCompile(`(?is)^\s*/\*\s*skippr\s*:\s*([a-z_]+(?:\s*,\s*[a-z_]+)*)\s*\*/`)

// The directive's words.
const (
	asOfLakeWord       = "as_of_lake"
	includeDeletedWord = "include_deleted"
)

// AsOfLakeDirective is the comment that asks for the lake alone.
const AsOfLakeDirective = "/* skippr: " + asOfLakeWord + " */"

// directives are the options a statement's leading comment asks for.
type directives struct {
	asOfLake       bool
	includeDeleted bool
}

// directive splits the leading options comment off sql.
func directive(sql string) (rest string, d directives) {
	m := directiveRE.FindStringSubmatchIndex(sql)
	if m == nil {
		return sql, directives{}
	}
	for _, w := range strings.Split(sql[m[2]:m[3]], ",") {
		switch strings.ToLower(strings.TrimSpace(w)) {
		case asOfLakeWord:
			d.asOfLake = true
		case includeDeletedWord:
			d.includeDeleted = true
		default:
			return sql, directives{} // not ours: the comment stays part of the statement
		}
	}
	return sql[m[1]:], d
}

// withDirective puts the comment back in front of sql for the options d asks for.
func withDirective(sql string, d directives) string {
	var words []string
	if d.asOfLake {
		words = append(words, asOfLakeWord)
	}
	if d.includeDeleted {
		words = append(words, includeDeletedWord)
	}
	if len(words) == 0 {
		return sql
	}
	return "/* skippr: " + strings.Join(words, ", ") + " */ " + strings.TrimLeft(sql, " \t\r\n")
}
