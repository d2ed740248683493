//go:build duckdb_arrow

package query

import (
	"errors"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"

	"github.com/skippr-dev/skippr/plugin-sdk/lakequery"
)

// TestQueryArrowOutput: the arrow format is an Arrow IPC stream of the merged answer; an empty answer still
// carries its schema; bad SQL is a query error as in the other formats.
func TestQueryArrowOutput(t *testing.T) {
	for _, c := range []struct {
		sql, schema, want string
	}{
		{"SELECT id, name FROM people ORDER BY id", "id:int64 name:utf8", "2 bob again|4 dee2|5 eve2"},
		{"SELECT id, name FROM people WHERE false", "id:int64 name:utf8", ""},
	} {
		out, summary, err := run(t, c.sql, lakequery.FormatArrow, false)
		if err != nil {
			t.Fatal(err)
		}
		r, err := ipc.NewReader(strings.NewReader(out))
		if err != nil {
			t.Fatalf("%s: not an Arrow IPC stream: %v", c.sql, err)
		}
		var fields, rows []string
		for _, f := range r.Schema().Fields() {
			fields = append(fields, f.Name+":"+f.Type.String())
		}
		for r.Next() {
			rec := r.RecordBatch()
			for i := 0; i < int(rec.NumRows()); i++ {
				rows = append(rows, rec.Column(0).(*array.Int64).ValueStr(i)+" "+rec.Column(1).(*array.String).Value(i))
			}
		}
		if r.Err() != nil {
			t.Fatal(r.Err())
		}
		if got := strings.Join(fields, " "); got != c.schema {
			t.Errorf("%s: schema %s, want %s", c.sql, got, c.schema)
		}
		if got := strings.Join(rows, "|"); got != c.want {
			t.Errorf("%s: rows %q, want %q (summary %s)", c.sql, got, c.want, summary)
		}
	}
	if _, _, err := run(t, "SELEC 1", lakequery.FormatArrow, false); !errors.Is(err, lakequery.ErrSQL) {
		t.Fatalf("bad SQL: %v, want a query error", err)
	}
}
