package queryserve

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A prepared statement's handle holds the statement and its bound parameters as SQL literals, so the server
// keeps nothing per statement: binding (DoPut) returns a new handle, as Flight SQL allows, and a handle works
// on any server of the same config, also after a restart.
type handle struct {
	SQL  string   `json:"sql"`
	Args []string `json:"args,omitempty"`
}

func (h handle) encode() []byte {
	b, _ := json.Marshal(h) // strings only: cannot fail
	return b
}

func decodeHandle(b []byte) (handle, error) {
	var h handle
	if err := json.Unmarshal(b, &h); err != nil || h.SQL == "" {
		return h, status.Error(codes.InvalidArgument, "not a prepared statement handle of skippr serve")
	}
	return h, nil
}

// preparedName names the statement DuckDB prepares for a bound handle; the _skippr_ prefix is reserved.
const preparedName = "_skippr_prepared"

// statement is the SQL to run for h: with parameters, DuckDB itself prepares the statement and binds the
// literals to its placeholders (? or $1), so no SQL is parsed here. The options comment stays in front.
func (h handle) statement() string {
	if len(h.Args) == 0 {
		return h.SQL
	}
	sql, d := directive(h.SQL)
	return withDirective(fmt.Sprintf("PREPARE %s AS %s;\nEXECUTE %s(%s)", preparedName, strings.TrimRight(strings.TrimSpace(sql), "; \t\n"),
		preparedName, strings.Join(h.Args, ", ")), d)
}

// bind reads the parameter batches of a DoPut: one row, one column per placeholder in order.
func bind(h handle, rdr flight.MessageReader) (handle, error) {
	var rows int64
	var args []string
	for rdr.Next() {
		rec := rdr.RecordBatch()
		rows += rec.NumRows()
		if rows > 1 {
			return h, status.Error(codes.InvalidArgument, "skippr serve binds one row of parameters to a query (got more)")
		}
		if rec.NumRows() == 0 {
			continue
		}
		for c := 0; c < int(rec.NumCols()); c++ {
			lit, err := literalOf(rec.Column(c), 0)
			if err != nil {
				return h, status.Errorf(codes.InvalidArgument, "parameter %d (%s): %v", c+1, rec.ColumnName(c), err)
			}
			args = append(args, lit)
		}
	}
	if err := rdr.Err(); err != nil {
		return h, status.Errorf(codes.InvalidArgument, "read parameters: %v", err)
	}
	h.Args = args
	return h, nil
}

// literalOf is value i of a as a DuckDB literal of the same type.
func literalOf(a arrow.Array, i int) (string, error) {
	if a.IsNull(i) {
		return "NULL", nil
	}
	typed := func(v, t string) string { return "CAST(" + v + " AS " + t + ")" }
	switch x := a.(type) {
	case *array.Boolean:
		return strconv.FormatBool(x.Value(i)), nil
	case *array.Int8:
		return typed(strconv.FormatInt(int64(x.Value(i)), 10), "TINYINT"), nil
	case *array.Int16:
		return typed(strconv.FormatInt(int64(x.Value(i)), 10), "SMALLINT"), nil
	case *array.Int32:
		return typed(strconv.FormatInt(int64(x.Value(i)), 10), "INTEGER"), nil
	case *array.Int64:
		return typed(strconv.FormatInt(x.Value(i), 10), "BIGINT"), nil
	case *array.Uint8:
		return typed(strconv.FormatUint(uint64(x.Value(i)), 10), "UTINYINT"), nil
	case *array.Uint16:
		return typed(strconv.FormatUint(uint64(x.Value(i)), 10), "USMALLINT"), nil
	case *array.Uint32:
		return typed(strconv.FormatUint(uint64(x.Value(i)), 10), "UINTEGER"), nil
	case *array.Uint64:
		return typed(strconv.FormatUint(x.Value(i), 10), "UBIGINT"), nil
	case *array.Float32:
		return floatLiteral(float64(x.Value(i)), 32, "FLOAT"), nil
	case *array.Float64:
		return floatLiteral(x.Value(i), 64, "DOUBLE"), nil
	case *array.String:
		return literal(x.Value(i)), nil
	case *array.LargeString:
		return literal(x.Value(i)), nil
	case *array.Binary:
		return blobLiteral(x.Value(i)), nil
	case *array.LargeBinary:
		return blobLiteral(x.Value(i)), nil
	case *array.Date32:
		return typed(literal(x.Value(i).ToTime().Format("2006-01-02")), "DATE"), nil
	case *array.Timestamp:
		unit := x.DataType().(*arrow.TimestampType)
		t := x.Value(i).ToTime(unit.Unit).UTC().Format("2006-01-02 15:04:05.999999999")
		if unit.TimeZone != "" {
			return typed(literal(t+"+00"), "TIMESTAMPTZ"), nil
		}
		return typed(literal(t), "TIMESTAMP"), nil
	case *array.Decimal128:
		dt := x.DataType().(*arrow.Decimal128Type)
		return typed(literal(x.ValueStr(i)), fmt.Sprintf("DECIMAL(%d, %d)", dt.Precision, dt.Scale)), nil
	}
	return "", fmt.Errorf("type %s is not supported as a parameter (use a string, number, boolean, date, timestamp, decimal or binary)", a.DataType())
}

func floatLiteral(v float64, bits int, t string) string {
	switch {
	case math.IsNaN(v):
		return "CAST('nan' AS " + t + ")"
	case math.IsInf(v, 1):
		return "CAST('inf' AS " + t + ")"
	case math.IsInf(v, -1):
		return "CAST('-inf' AS " + t + ")"
	}
	return "CAST(" + literal(strconv.FormatFloat(v, 'g', -1, bits)) + " AS " + t + ")"
}

// blobLiteral writes every byte as \xHH, which DuckDB's BLOB literal reads back exactly.
func blobLiteral(b []byte) string {
	var sb strings.Builder
	sb.WriteString("CAST('")
	h := hex.EncodeToString(b)
	for i := 0; i < len(h); i += 2 {
		sb.WriteString(`\x`)
		sb.WriteString(h[i : i+2])
	}
	sb.WriteString("' AS BLOB)")
	return sb.String()
}
