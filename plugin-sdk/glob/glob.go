// Package glob matches table-name patterns of the sources' tables setting: `*` stands for any run of characters
// (also none), `?` for exactly one character, everything else for itself. There is no escape and no character
// class: a name holding `*` or `?` is named exactly by a quoted part where the source's syntax has quoting
// (Postgres), and MySQL table names with them are rare enough to be named in a pattern by `?`.
//
// Matching is by character (rune), case-sensitive: each source folds case before it matches, as its server does.
package glob

import "strings"

// Has says whether s holds a wildcard, which makes it a pattern instead of a name.
func Has(s string) bool { return strings.ContainsAny(s, "*?") }

// Match reports whether name matches pattern as a whole.
func Match(pattern, name string) bool {
	p, n := []rune(pattern), []rune(name)
	// Iterative matching with one backtrack point (the last `*`): linear in practice, never exponential.
	pi, ni, star, mark := 0, 0, -1, 0
	for ni < len(n) {
		switch {
		case pi < len(p) && (p[pi] == '?' || p[pi] == n[ni]) && p[pi] != '*':
			pi++
			ni++
		case pi < len(p) && p[pi] == '*':
			star, mark = pi, ni
			pi++
		case star >= 0:
			pi = star + 1
			mark++
			ni = mark
		default:
			return false
		}
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}
