package lakequery

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

// The prompt gathers lines into statements ending with ';' and leaves on .quit, .exit or \q typed where a
// statement would start (inside one they are part of it).
func TestStatement(t *testing.T) {
	type step struct {
		sql        string
		done, quit bool
	}
	tests := []struct {
		name  string
		lines []string
		want  []step
	}{
		{"one line", []string{"SELECT 1;"}, []step{{"SELECT 1;\n", true, false}}},
		{"spaces after ;", []string{"SELECT 1;  "}, []step{{"SELECT 1;  \n", true, false}}},
		{"two lines", []string{"SELECT *", "FROM t;"}, []step{{}, {"SELECT *\nFROM t;\n", true, false}}},
		{"after a statement", []string{"SELECT 1;", "SELECT", "2;"}, []step{{"SELECT 1;\n", true, false}, {}, {"SELECT\n2;\n", true, false}}},
		{"quit", []string{" .quit "}, []step{{"", false, true}}},
		{"exit", []string{".exit"}, []step{{"", false, true}}},
		{`\q`, []string{`\q`}, []step{{"", false, true}}},
		{"quit inside a statement", []string{"SELECT '", ".quit", "';"}, []step{{}, {}, {"SELECT '\n.quit\n';\n", true, false}}},
		{"blank line", []string{""}, []step{{}}},
	}
	for _, tt := range tests {
		var s statement
		var got []step
		for _, l := range tt.lines {
			sql, done, quit := s.add(l)
			got = append(got, step{sql, done, quit})
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: %q gave %+v; want %+v", tt.name, tt.lines, got, tt.want)
		}
	}
}

// Without a terminal the statement is stdin up to EOF: none is a usage error, a read failure says so. Neither
// reaches the querier (nil here); answering real statements is covered by test/e2e TestQueryLakePlusWAL.
func TestReadWithoutStatement(t *testing.T) {
	tests := []struct {
		name string
		in   string
		fail bool // the reader fails
		want error
		msg  string
	}{
		{"empty", "", false, ErrNoSQL, "query: no SQL given (as an argument or on stdin)"},
		{"blank", " \n\t\n", false, ErrNoSQL, "query: no SQL given (as an argument or on stdin)"},
		{"read error", "", true, iotest.ErrTimeout, "query: read SQL from stdin: timeout"},
	}
	for _, tt := range tests {
		c := &Console{In: strings.NewReader(tt.in), Out: &strings.Builder{}, Err: &strings.Builder{}}
		if tt.fail {
			c.In = iotest.ErrReader(iotest.ErrTimeout)
		}
		err := c.Read(context.Background())
		if !errors.Is(err, tt.want) || err.Error() != tt.msg {
			t.Errorf("%s: %v; want %q", tt.name, err, tt.msg)
		}
	}
}
