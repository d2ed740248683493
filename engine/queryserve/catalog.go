package queryserve

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/flight/flightsql"
	"github.com/apache/arrow-go/v18/arrow/flight/flightsql/schema_ref"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The catalog calls are answered by the query engine itself, from the information schema of the database a
// statement sees: the names a client browses are exactly the names its SQL resolves (the lake's namespaces
// as schemas, tables that exist only in the WAL so far included). Each call is one statement, with the same
// limits; a table's schema, when asked, is one more (SELECT … LIMIT 0) per table.

// tableRef is one table as the engine names it.
type tableRef struct{ catalog, schema, table string }

// tables lists the lake tables whose catalog is catalog (nil: any) and whose schema and name match the SQL
// LIKE patterns (nil: any).
func (s *Server) tables(ctx context.Context, catalog, schemaLike, tableLike *string) ([]tableRef, error) {
	where := []string{"table_type = 'VIEW'", "table_schema NOT IN ('information_schema', 'pg_catalog')"}
	if catalog != nil {
		where = append(where, "table_catalog = "+literal(*catalog))
	}
	if schemaLike != nil {
		where = append(where, "table_schema LIKE "+literal(*schemaLike))
	}
	if tableLike != nil {
		where = append(where, "table_name LIKE "+literal(*tableLike))
	}
	rows, err := s.strings(ctx, "SELECT table_catalog, table_schema, table_name FROM information_schema.tables WHERE "+
		strings.Join(where, " AND ")+" ORDER BY 1, 2, 3")
	if err != nil {
		return nil, err
	}
	out := make([]tableRef, len(rows))
	for i, r := range rows {
		out[i] = tableRef{r[0], r[1], r[2]}
	}
	return out, nil
}

// literal quotes s as a SQL string.
func literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// ident quotes s as a SQL identifier.
func ident(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// strings runs sql, whose columns are all text, and returns its rows.
func (s *Server) strings(ctx context.Context, sql string) ([][]string, error) {
	_, ch, err := s.query(ctx, sql)
	if err != nil {
		return nil, err
	}
	var rows [][]string
	var failed error
	for c := range ch {
		if c.Err != nil {
			failed = c.Err
			continue
		}
		if failed == nil {
			rows, failed = appendStrings(rows, c.Data)
		}
		c.Data.Release()
	}
	return rows, failed
}

func appendStrings(rows [][]string, rec arrow.RecordBatch) ([][]string, error) {
	cols := make([]*array.String, rec.NumCols())
	for i := range cols {
		c, ok := rec.Column(i).(*array.String)
		if !ok {
			return rows, status.Errorf(codes.Internal, "catalog column %s is %s, not text", rec.ColumnName(i), rec.Column(i).DataType())
		}
		cols[i] = c
	}
	for r := 0; r < int(rec.NumRows()); r++ {
		row := make([]string, len(cols))
		for i, c := range cols {
			row[i] = c.Value(r)
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// GetFlightInfoCatalogs: see DoGetCatalogs.
func (s *Server) GetFlightInfoCatalogs(_ context.Context, desc *flight.FlightDescriptor) (*flight.FlightInfo, error) {
	return infoFor(desc, schema_ref.Catalogs, s.mem), nil
}

// DoGetCatalogs lists the catalogs that hold lake tables (DuckDB's in-memory database, "memory").
func (s *Server) DoGetCatalogs(ctx context.Context) (*arrow.Schema, <-chan flight.StreamChunk, error) {
	ts, err := s.tables(ctx, nil, nil, nil)
	if err != nil {
		return nil, nil, err
	}
	var names []*string
	for _, t := range ts {
		if len(names) == 0 || *names[len(names)-1] != t.catalog {
			names = append(names, &t.catalog)
		}
	}
	return s.stream(schema_ref.Catalogs, names)
}

// GetFlightInfoSchemas: see DoGetDBSchemas.
func (s *Server) GetFlightInfoSchemas(_ context.Context, _ flightsql.GetDBSchemas, desc *flight.FlightDescriptor) (*flight.FlightInfo, error) {
	return infoFor(desc, schema_ref.DBSchemas, s.mem), nil
}

// DoGetDBSchemas lists the schemas (the lakes' namespaces) that hold lake tables.
func (s *Server) DoGetDBSchemas(ctx context.Context, cmd flightsql.GetDBSchemas) (*arrow.Schema, <-chan flight.StreamChunk, error) {
	ts, err := s.tables(ctx, cmd.GetCatalog(), cmd.GetDBSchemaFilterPattern(), nil)
	if err != nil {
		return nil, nil, err
	}
	var cats, schemas []*string
	for _, t := range ts {
		if n := len(cats); n > 0 && *cats[n-1] == t.catalog && *schemas[n-1] == t.schema {
			continue
		}
		cats, schemas = append(cats, &t.catalog), append(schemas, &t.schema)
	}
	return s.stream(schema_ref.DBSchemas, cats, schemas)
}

// GetFlightInfoTables: see DoGetTables.
func (s *Server) GetFlightInfoTables(_ context.Context, cmd flightsql.GetTables, desc *flight.FlightDescriptor) (*flight.FlightInfo, error) {
	sc := schema_ref.Tables
	if cmd.GetIncludeSchema() {
		sc = schema_ref.TablesWithIncludedSchema
	}
	return infoFor(desc, sc, s.mem), nil
}

// DoGetTables lists the lake tables, each with its Arrow schema when asked.
func (s *Server) DoGetTables(ctx context.Context, cmd flightsql.GetTables) (*arrow.Schema, <-chan flight.StreamChunk, error) {
	sc := schema_ref.Tables
	if cmd.GetIncludeSchema() {
		sc = schema_ref.TablesWithIncludedSchema
	}
	var ts []tableRef
	if types := cmd.GetTableTypes(); len(types) == 0 || slices.Contains(types, tableType) {
		var err error
		if ts, err = s.tables(ctx, cmd.GetCatalog(), cmd.GetDBSchemaFilterPattern(), cmd.GetTableNameFilterPattern()); err != nil {
			return nil, nil, err
		}
	}
	b := array.NewRecordBuilder(s.mem, sc)
	defer b.Release()
	for _, t := range ts {
		b.Field(0).(*array.StringBuilder).Append(t.catalog)
		b.Field(1).(*array.StringBuilder).Append(t.schema)
		b.Field(2).(*array.StringBuilder).Append(t.table)
		b.Field(3).(*array.StringBuilder).Append(tableType)
		if cmd.GetIncludeSchema() {
			tsc, err := s.schemaOf(ctx, t)
			if err != nil {
				return nil, nil, err
			}
			b.Field(4).(*array.BinaryBuilder).Append(flight.SerializeSchema(tsc, s.mem))
		}
	}
	ch := make(chan flight.StreamChunk, 1)
	ch <- flight.StreamChunk{Data: b.NewRecordBatch()}
	close(ch)
	return sc, ch, nil
}

// schemaOf is a table's Arrow schema as a statement over it returns it.
func (s *Server) schemaOf(ctx context.Context, t tableRef) (*arrow.Schema, error) {
	sc, ch, err := s.query(ctx, fmt.Sprintf("SELECT * FROM %s.%s.%s LIMIT 0", ident(t.catalog), ident(t.schema), ident(t.table)))
	if err != nil {
		return nil, err
	}
	var failed error
	for c := range ch {
		if c.Err != nil {
			failed = c.Err
		} else {
			c.Data.Release()
		}
	}
	return sc, failed
}
