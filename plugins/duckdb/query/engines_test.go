package query

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
)

// The single-SELECT verdict is the parser's, remembered by statement text: a repeated statement is not parsed
// again (the second ask goes to a closed connection, which could not answer), anything but one SELECT stays
// refused, and the memory of verdicts stays bounded.
func TestSingleSelectRemembered(t *testing.T) {
	ctx := context.Background()
	db, err := sql.Open("duckdb", "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	c := newEngineCache(t.TempDir(), DefaultEngineCacheBytes)
	for _, tc := range []struct {
		sql  string
		want bool
	}{
		{"SELECT 1", true},
		{"SELECT * FROM people WHERE id = 7", true},
		{"CREATE TABLE x (a INT)", false},
		{"SELECT 1; SELECT 2", false},
		{"COPY (SELECT 1) TO 'out.csv'", false},
		{"SELEC 1", false},
	} {
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.singleSelect(ctx, conn, tc.sql)
		conn.Close()
		if err != nil || got != tc.want {
			t.Fatalf("%q: single select %v (%v), want %v", tc.sql, got, err, tc.want)
		}
		closed, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		closed.Close()
		if again, err := c.singleSelect(ctx, closed, tc.sql); err != nil || again != tc.want {
			t.Fatalf("%q asked again: %v (%v), want the remembered %v", tc.sql, again, err, tc.want)
		}
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for i := range maxSelects + 10 {
		if _, err := c.singleSelect(ctx, conn, fmt.Sprintf("SELECT %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(c.selects); n > maxSelects {
		t.Fatalf("%d verdicts remembered, bound %d", n, maxSelects)
	}
}
