package query

import (
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
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
	case lakequery.FormatCSV, lakequery.FormatJSON:
		return copyOut(ctx, conn, exactColumns(ctx, conn, q, req.Format), req.Format, w, tmp)
	case lakequery.FormatParquet:
		return copyOut(ctx, conn, q, req.Format, w, tmp)
	case lakequery.FormatArrow:
		return arrowOut(ctx, conn, q, w)
	}
	return 0, fmt.Errorf("format %q is not table, csv, json, parquet or arrow", req.Format)
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

// exactColumns rewrites q so that csv and json print every value exactly and json stays JSON:
//
//   - TIMESTAMPTZ columns (and their lists' elements) are printed from their microseconds as UTC text. DuckDB prints a TIMESTAMPTZ through
//     ICU's calendar, which counts milliseconds in a double: near the end of the range (year 294247) that is
//     a millisecond off. A plain TIMESTAMP prints exactly, ±infinity and BC years included.
//   - in json, FLOAT and DOUBLE NaN and ±Infinity (alone or in a list) become the strings "NaN", "Infinity" and "-Infinity" (as
//     PostgreSQL's to_json writes them): DuckDB's JSON writer puts the bare words, which no JSON parser reads.
//
// q is returned as it is when it has no such column or its columns cannot be read (COPY then reports the
// error in the SQL), or when two columns share a name (REPLACE could not tell them apart).
func exactColumns(ctx context.Context, conn *sql.Conn, q, format string) string {
	rows, err := conn.QueryContext(ctx, "SELECT * FROM ("+q+") LIMIT 0")
	if err != nil {
		return q
	}
	cols, err := rows.ColumnTypes()
	rows.Close()
	if err != nil {
		return q
	}
	seen := map[string]bool{}
	var repl []string
	for _, c := range cols {
		if seen[c.Name()] {
			return q
		}
		seen[c.Name()] = true
		switch dbType := c.DatabaseTypeName(); {
		case strings.HasSuffix(dbType, "[]") && isTimestampTZ(strings.TrimSuffix(dbType, "[]")):
			repl = append(repl, fmt.Sprintf("list_transform(%[1]s, x -> CASE WHEN isfinite(x) THEN make_timestamp(epoch_us(x))::VARCHAR || '+00' ELSE x::VARCHAR END) AS %[1]s",
				ducksql.Ident(c.Name())))
		case isTimestampTZ(dbType):
			repl = append(repl, fmt.Sprintf("CASE WHEN isfinite(%[1]s) THEN make_timestamp(epoch_us(%[1]s))::VARCHAR || '+00' ELSE %[1]s::VARCHAR END AS %[1]s",
				ducksql.Ident(c.Name())))
		case format == lakequery.FormatJSON && (dbType == "FLOAT" || dbType == "DOUBLE"):
			repl = append(repl, jsonFloat(ducksql.Ident(c.Name()))+" AS "+ducksql.Ident(c.Name()))
		case format == lakequery.FormatJSON && (dbType == "FLOAT[]" || dbType == "DOUBLE[]"):
			repl = append(repl, fmt.Sprintf("to_json(list_transform(%[1]s, x -> %[2]s)) AS %[1]s", ducksql.Ident(c.Name()), jsonFloat("x")))
		}
	}
	if len(repl) == 0 {
		return q
	}
	return "SELECT * REPLACE (" + strings.Join(repl, ", ") + ") FROM (" + q + ")"
}

// jsonFloat is the JSON of the float expression x, with NaN and ±Infinity as strings.
func jsonFloat(x string) string {
	return fmt.Sprintf(`CASE WHEN isnan(%[1]s) THEN '"NaN"'::JSON WHEN isinf(%[1]s) AND %[1]s > 0 THEN '"Infinity"'::JSON WHEN isinf(%[1]s) THEN '"-Infinity"'::JSON ELSE to_json(%[1]s) END`, x)
}

func isTimestampTZ(dbType string) bool {
	return dbType == "TIMESTAMPTZ" || strings.Contains(dbType, "TIME ZONE")
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
		return formatTime(x, dbType)
	case []byte:
		if dbType == "UUID" && len(x) == 16 {
			return fmt.Sprintf("%x-%x-%x-%x-%x", x[:4], x[4:6], x[6:8], x[8:10], x[10:])
		}
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

// The driver hands DuckDB's infinities over as the instants their sentinels would be (DuckDB keeps ±infinity
// as the largest and the negated largest count of its unit), which no finite value equals.
var (
	infTimestamp    = time.UnixMicro(math.MaxInt64).UTC()
	negInfTimestamp = time.UnixMicro(-math.MaxInt64).UTC()
)

const (
	infDate    = math.MaxInt32
	negInfDate = -math.MaxInt32
)

// formatTime prints dates and times as DuckDB does: ±infinity as words and years before 1 as "(BC)", where
// Go would print the sentinel's finite instant and an astronomical year (-4712 for 4713 BC).
func formatTime(x time.Time, dbType string) string {
	x = x.UTC()
	switch {
	case strings.HasPrefix(dbType, "TIME") && !strings.HasPrefix(dbType, "TIMESTAMP"):
		return x.Format("15:04:05.999999")
	case dbType == "DATE":
		switch days := x.Unix() / 86400; days {
		case infDate:
			return "infinity"
		case negInfDate:
			return "-infinity"
		}
		return civilDate(x)
	case x.Equal(infTimestamp):
		return "infinity"
	case x.Equal(negInfTimestamp):
		return "-infinity"
	}
	day := civilDate(x)
	clock := x.Format("15:04:05.999999")
	if isTimestampTZ(dbType) {
		clock += "Z"
	}
	if bc := strings.TrimSuffix(day, " (BC)"); bc != day {
		return bc + " (BC) " + clock
	}
	return day + " " + clock
}

// civilDate is the date part, with years before 1 as "(BC)" (year 0 is 1 BC).
func civilDate(x time.Time) string {
	y := x.Year()
	if y > 0 {
		return fmt.Sprintf("%04d-%02d-%02d", y, x.Month(), x.Day())
	}
	return fmt.Sprintf("%04d-%02d-%02d (BC)", 1-y, x.Month(), x.Day())
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
