package query

import (
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/duckdb/duckdb-go/v2"

	"github.com/skippr-dev/skippr/plugin-sdk/lakequery"
	"github.com/skippr-dev/skippr/plugins/duckdb/ducksql"
)

// answer runs the request's SQL and writes the result to w; it returns the number of rows.
func answer(ctx context.Context, conn *sql.Conn, req lakequery.Request, w io.Writer, tmp string) (int64, error) {
	q := strings.TrimRight(strings.TrimSpace(req.SQL), "; \t\n")
	switch req.Format {
	case "", lakequery.FormatTable:
		return printTable(ctx, conn, q, w)
	case lakequery.FormatCSV, lakequery.FormatJSON, lakequery.FormatParquet:
		return copyOut(ctx, conn, q, req.Format, w, tmp)
	}
	return 0, fmt.Errorf("format %q is not table, csv, json or parquet", req.Format)
}

// copyOut lets DuckDB write the result in a file format, then streams the file: DuckDB's Parquet writer
// needs a file it can seek in.
func copyOut(ctx context.Context, conn *sql.Conn, q, format string, w io.Writer, tmp string) (int64, error) {
	path := filepath.Join(tmp, "result."+format)
	opts := map[string]string{
		lakequery.FormatCSV:     "FORMAT csv, HEADER true",
		lakequery.FormatJSON:    "FORMAT json", // one object per line
		lakequery.FormatParquet: "FORMAT parquet, COMPRESSION zstd",
	}[format]
	res, err := conn.ExecContext(ctx, fmt.Sprintf("COPY (%s) TO %s (%s)", q, ducksql.Literal(path), opts))
	if err != nil {
		return 0, err
	}
	n, _ := res.RowsAffected()
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("read result: %w", err)
	}
	defer f.Close()
	if _, err := io.Copy(w, f); err != nil {
		return 0, fmt.Errorf("write result: %w", err)
	}
	return n, nil
}

// printTable prints the result as aligned columns, as a person reads it.
func printTable(ctx context.Context, conn *sql.Conn, q string, w io.Writer) (int64, error) {
	rows, err := conn.QueryContext(ctx, q)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	cols, err := rows.ColumnTypes()
	if err != nil {
		return 0, err
	}
	if len(cols) == 2 && cols[0].Name() == "explain_key" && cols[1].Name() == "explain_value" {
		return printPlan(rows, w)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := make([]string, len(cols))
	rule := make([]string, len(cols))
	for i, c := range cols {
		head[i] = c.Name()
		rule[i] = strings.Repeat("-", max(utf8.RuneCountInString(c.Name()), 3))
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	fmt.Fprintln(tw, strings.Join(rule, "\t"))
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	var n int64
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return n, err
		}
		cells := make([]string, len(cols))
		for i, v := range vals {
			// Tabs and newlines inside a value would break the alignment.
			cells[i] = strings.NewReplacer("\t", `\t`, "\n", `\n`).Replace(formatValue(v, cols[i].DatabaseTypeName()))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
		n++
	}
	if err := rows.Err(); err != nil {
		return n, err
	}
	return n, tw.Flush()
}

// printPlan prints EXPLAIN's drawing as it is: a table cell would flatten its lines.
func printPlan(rows *sql.Rows, w io.Writer) (int64, error) {
	var n int64
	for rows.Next() {
		var key, plan string
		if err := rows.Scan(&key, &plan); err != nil {
			return n, err
		}
		fmt.Fprintln(w, plan)
		n++
	}
	return n, rows.Err()
}

// formatValue renders one value the way DuckDB's own shell would, near enough for reading.
func formatValue(v any, dbType string) string {
	switch x := v.(type) {
	case nil:
		return "NULL"
	case time.Time:
		switch {
		case dbType == "DATE":
			return x.Format("2006-01-02")
		case strings.HasPrefix(dbType, "TIME") && !strings.HasPrefix(dbType, "TIMESTAMP"):
			return x.Format("15:04:05.999999")
		case strings.Contains(dbType, "TIME ZONE") || dbType == "TIMESTAMPTZ":
			return x.UTC().Format("2006-01-02 15:04:05.999999Z07:00")
		}
		return x.Format("2006-01-02 15:04:05.999999")
	case []byte:
		return `\x` + hex.EncodeToString(x)
	case duckdb.Decimal:
		return decimalString(x)
	case *big.Int:
		return x.String()
	case duckdb.UUID:
		return x.String()
	case *duckdb.UUID:
		return x.String()
	case duckdb.Interval:
		return fmt.Sprintf("%d months %d days %d us", x.Months, x.Days, x.Micros)
	case map[string]any, []any, duckdb.Map:
		b, err := json.Marshal(jsonable(x))
		if err != nil {
			return fmt.Sprint(x)
		}
		return string(b)
	}
	return fmt.Sprint(v)
}

// decimalString keeps the column's scale (1.50, 0.00), as SQL shells print a DECIMAL; the driver's String
// trims trailing zeros.
func decimalString(d duckdb.Decimal) string {
	digits := new(big.Int).Abs(d.Value).String()
	sign := ""
	if d.Value.Sign() < 0 {
		sign = "-"
	}
	if d.Scale == 0 {
		return sign + digits
	}
	if pad := int(d.Scale) + 1 - len(digits); pad > 0 {
		digits = strings.Repeat("0", pad) + digits
	}
	cut := len(digits) - int(d.Scale)
	return sign + digits[:cut] + "." + digits[cut:]
}

// jsonable turns the driver's nested values into what encoding/json can write.
func jsonable(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = jsonable(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = jsonable(e)
		}
		return out
	case duckdb.Map:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[fmt.Sprint(jsonable(k))] = jsonable(e)
		}
		return out
	case time.Time, nil, bool, string, float64, float32, int, int8, int16, int32, int64, uint8, uint16, uint32, uint64:
		return x
	}
	return formatValue(v, "")
}
