package queryserve

import (
	"regexp"
	"strings"
)

// A statement asks for `skippr query --as-of-lake` (the lake alone, without the WAL's unapplied rows) with a
// leading comment: `/* skippr: as_of_lake */ SELECT …`. A comment, because Flight SQL has no per-statement
// options a generic client (ADBC, JDBC, a BI tool) can set without custom code, while every client sends the
// SQL text as written. Only a comment at the very start counts (after whitespace), so the same words inside
// a string literal or a later comment change nothing.
var directiveRE = regexp.MustCompile(`(?is)^\s*/\*\s*skippr\s*:\s*as_of_lake\s*\*/`)

// AsOfLakeDirective is the comment that asks for the lake alone.
const AsOfLakeDirective = "/* skippr: as_of_lake */"

// directive splits the leading as-of-lake comment off sql.
func directive(sql string) (rest string, asOfLake bool) {
	if loc := directiveRE.FindStringIndex(sql); loc != nil {
		return sql[loc[1]:], true
	}
	return sql, false
}

// withDirective puts the comment back in front of sql when asOfLake.
func withDirective(sql string, asOfLake bool) string {
	if !asOfLake {
		return sql
	}
	return AsOfLakeDirective + " " + strings.TrimLeft(sql, " \t\r\n")
}
