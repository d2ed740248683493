package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// QueryJSON runs `skippr query --json` and decodes its lines.
func (e *Env) QueryJSON(sql string, asOfLake bool) []any {
	e.T.Helper()
	args := []string{"query", "--json", sql}
	if asOfLake {
		args = []string{"query", "--json", "--as-of-lake", sql}
	}
	r := e.MustRun(args...)
	return DecodeLines(e.T, r.Stdout)
}

// PgJSON runs sql on Postgres and returns its rows as JSON objects, as DuckDB's JSON output has them.
func PgJSON(t *testing.T, ctx context.Context, pg *pgx.Conn, sql string) []any {
	t.Helper()
	rows, err := pg.Query(ctx, fmt.Sprintf(`SELECT row_to_json(q)::text FROM (%s) q`, sql))
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return DecodeLines(t, strings.Join(lines, "\n"))
}

// DecodeLines decodes JSON lines; numbers become float64, so 1.50 and 1.5 compare equal.
func DecodeLines(t *testing.T, s string) []any {
	t.Helper()
	out := []any{}
	dec := json.NewDecoder(strings.NewReader(s))
	for dec.More() {
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("decode %q: %v", s, err)
		}
		out = append(out, v)
	}
	return out
}

func Show(v []any) string {
	b, _ := json.Marshal(v)
	if len(b) > 2000 {
		return string(b[:2000]) + "…"
	}
	return string(b)
}
