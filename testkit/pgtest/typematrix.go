package pgtest

import (
	"fmt"
	"strings"
	"testing"
)

// TypeCase is one column of the type matrix: a PostgreSQL type, the Arrow type the postgres source maps it to
// (as arrow.DataType.String prints it), and values in SQL literal form that every destination must carry
// unchanged.
type TypeCase struct {
	Col, PGType, Arrow string
	Values             []string
}

// TypeMatrix is the mapping table of plugins/postgres/README.md with edge values (the ends of each range,
// NaN, ±infinity, empty values, non-ASCII text, BC dates). The postgres plugin's TestTypesRoundTrip carries it
// into PostgreSQL, cmd/skippr's TestTypeMatrixIntoIceberg into an Iceberg lake and through skippr query: one
// list, so a type added to the README is checked on every leg.
var TypeMatrix = []TypeCase{
	{"c_int2", "int2", "int16", []string{"0", "'-32768'", "32767"}},
	{"c_int4", "int4", "int32", []string{"1", "'-2147483648'", "2147483647"}},
	{"c_int8", "int8", "int64", []string{"'-9223372036854775808'", "9223372036854775807", "42"}},
	{"c_float4", "real", "float32", []string{"1.5", "'NaN'", "'-Infinity'", "3.4028235e+38", "'-0'"}},
	{"c_float8", "double precision", "float64", []string{"0.1", "'Infinity'", "'NaN'", "2.2250738585072014e-308", "-1e300"}},
	{"c_numeric", "numeric(20,4)", "decimal(20, 4)", []string{"0", "-1234567890123456.7891", "200", "0.0001"}},
	{"c_numeric38", "numeric(38,0)", "decimal(38, 0)", []string{"99999999999999999999999999999999999999", "-1"}},
	{"c_numeric_free", "numeric", "utf8", []string{"'NaN'", "'Infinity'", "3.14159265358979323846264338327950288419716939937510", "1e-20"}},
	{"c_text", "text", "utf8", []string{"''", "E'tab\\there\\nnewline \\\\ back'", "'ünïcödé ✓ 日本'", "'NULL'", "'\\N'"}},
	{"c_varchar", "varchar(20)", "utf8", []string{"'short'", "'exactly twenty chars'"}},
	{"c_char", "char(5)", "utf8", []string{"'ab'", "'abcde'"}},
	{"c_bool", "bool", "bool", []string{"true", "false"}},
	{"c_bytea", "bytea", "binary", []string{"'\\x00ff10'", "''", "'\\x5c5c09'"}},
	{"c_uuid", "uuid", "fixed_size_binary[16]", []string{"'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'", "'00000000-0000-0000-0000-000000000000'"}},
	{"c_date", "date", "date32", []string{"'2024-02-29'", "'0044-03-15 BC'", "'4713-01-01 BC'", "'5874897-12-31'", "'1970-01-01'", "'infinity'", "'-infinity'"}},
	{"c_time", "time", "time64[us]", []string{"'00:00:00'", "'23:59:59.999999'", "'24:00:00'", "'12:30:00.5'"}},
	{"c_ts", "timestamp", "timestamp[us]", []string{"'2024-01-02 03:04:05.123456'", "'294247-01-10 04:00:54.775806'", "'4713-01-01 00:00:00 BC'", "'1500-06-01 12:00:00 BC'", "'1969-12-31 23:59:59.999999'", "'infinity'", "'-infinity'"}},
	{"c_tstz", "timestamptz", "timestamp[us, tz=UTC]", []string{"'2024-01-02 03:04:05.123456+05:30'", "'294247-01-10 04:00:54.775806+00'", "'2000-01-01 00:00:00+00'", "'0001-01-01 00:00:00+00 BC'", "'-infinity'", "'infinity'"}},
	{"c_interval", "interval", "month_day_nano_interval", []string{"'1 year 2 months 3 days 04:05:06.789'", "'-1 year +2 days -03:00:00.000001'", "'0'", "'-178000000 years'"}},
	{"c_json", "json", "utf8", []string{`'{"b": 1,  "a": [1, 2]}'`, `'"text"'`}},
	{"c_jsonb", "jsonb", "utf8", []string{`'{"b": 1, "a": {"x": null}}'`, `'[]'`}},
	{"c_int_arr", "int[]", "list<element: int32, nullable>", []string{"'{}'", "'{1,NULL,3}'", "'{-5}'"}},
	{"c_text_arr", "text[]", "list<element: utf8, nullable>", []string{`'{"a,b","q\"uote","back\\\\slash",NULL,"NULL",""}'`, "'{}'"}},
	{"c_num_arr", "numeric(6,2)[]", "list<element: decimal(6, 2), nullable>", []string{"'{1.50,-2.25,NULL}'"}},
	{"c_tstz_arr", "timestamptz[]", "list<element: timestamp[us, tz=UTC], nullable>", []string{"'{\"2024-01-01 00:00:00+00\",\"294247-01-10 04:00:54.775806+00\",infinity,-infinity}'"}},
	{"c_uuid_arr", "uuid[]", "list<element: fixed_size_binary[16], nullable>", []string{"'{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11,NULL}'"}},
	{"c_enum", "mood", "utf8", []string{"'happy'", "'sad'"}},
	{"c_enum_arr", "mood[]", "list<element: utf8, nullable>", []string{"'{happy,sad}'"}},
	{"c_domain", "posint", "int32", []string{"1", "2147483647"}},
	{"c_domain_text", "shorttext", "utf8", []string{"'dom'"}},
	{"c_timetz", "timetz", "utf8", []string{"'12:00:00+02'"}},
	{"c_inet", "inet", "utf8", []string{"'192.168.0.1/24'", "'::1'"}},
	{"c_cidr", "cidr", "utf8", []string{"'10.0.0.0/8'", "'2001:db8::/32'"}},
	{"c_macaddr", "macaddr", "utf8", []string{"'08:00:2b:01:02:03'"}},
	{"c_macaddr8", "macaddr8", "utf8", []string{"'08:00:2b:01:02:03:04:05'"}},
	{"c_money", "money", "utf8", []string{"'12.34'", "'-92233720368547758.08'", "'92233720368547758.07'", "'0'"}},
	{"c_int4range", "int4range", "utf8", []string{"'[1,10)'", "'empty'", "'(,5]'", "'[-2147483648,)'"}},
	{"c_numrange", "numrange", "utf8", []string{"'[1.5,2.25]'", "'(,)'"}},
	{"c_tstzrange", "tstzrange", "utf8", []string{`'["2024-01-01 00:00:00+00",infinity)'`, `'[-infinity,"2000-01-01 12:00:00+00"]'`}},
	{"c_daterange", "daterange", "utf8", []string{"'[2024-01-01,2024-02-01)'", "'[,infinity)'"}},
	{"c_multirange", "int4multirange", "utf8", []string{"'{[1,3), [5,7)}'", "'{}'"}},
	{"c_range_arr", "int4range[]", "list<element: utf8, nullable>", []string{`'{"[1,3)",empty,NULL}'`}},
	{"c_range_domain", "smallrange", "utf8", []string{"'[1,50)'"}},
	{"c_inet_domain", "privnet", "utf8", []string{"'10.1.2.3'"}},
	{"c_bit", "bit(4)", "utf8", []string{"B'1010'", "B'0000'"}},
	{"c_varbit", "varbit", "utf8", []string{"B'101'", "B''", "B'1111111100000000111'"}},
	{"c_xml", "xml", "utf8", []string{`'<a b="1">x &amp; ü</a>'`, "'just text'", "''"}},
	{"c_tsvector", "tsvector", "utf8", []string{"'a fat:2 cat:3A'", "''"}},
	{"c_tsquery", "tsquery", "utf8", []string{"'fat & (cat | rat)'"}},
	{"c_point", "point", "utf8", []string{"'(1,2)'", "'(-1.5,1e+300)'"}},
	{"c_line", "line", "utf8", []string{"'{1,-1,0}'"}},
	{"c_lseg", "lseg", "utf8", []string{"'[(0,0),(1,1)]'"}},
	{"c_box", "box", "utf8", []string{"'(1,1),(0,0)'"}},
	{"c_path", "path", "utf8", []string{"'[(0,0),(1,1),(2,0)]'", "'((0,0),(1,1))'"}},
	{"c_polygon", "polygon", "utf8", []string{"'((0,0),(1,1),(1,0))'"}},
	{"c_circle", "circle", "utf8", []string{"'<(0,0),1.5>'"}},
}

// TypeMatrixDDL creates the enum and domains the matrix uses.
const TypeMatrixDDL = `CREATE TYPE mood AS ENUM ('happy', 'sad');
	CREATE DOMAIN posint AS int4 CHECK (VALUE > 0);
	CREATE DOMAIN shorttext AS varchar(10);
	CREATE DOMAIN smallrange AS int4range CHECK (upper(VALUE) < 100);
	CREATE DOMAIN privnet AS inet CHECK (VALUE << '10.0.0.0/8')`

// TypeMatrixColumns is the column list of a matrix table after its key, as in CREATE TABLE.
func TypeMatrixColumns() string {
	var cols []string
	for _, c := range TypeMatrix {
		cols = append(cols, c.Col+" "+c.PGType)
	}
	return strings.Join(cols, ", ")
}

// TypeMatrixRows is the number of rows InsertTypeMatrix inserts: one per value of the longest column, and
// one all NULL.
func TypeMatrixRows() int {
	n := 0
	for _, c := range TypeMatrix {
		n = max(n, len(c.Values))
	}
	return n + 1
}

// InsertTypeMatrix inserts rows base … base+TypeMatrixRows()-1 into table (key column id first): row base+k
// takes value k of each column (NULL when a column has fewer), so every value appears; row base is all NULL.
func (db *DB) InsertTypeMatrix(t testing.TB, table string, base int) {
	t.Helper()
	var stmts []string
	for k := 0; k < TypeMatrixRows(); k++ {
		vals := []string{fmt.Sprint(base + k)}
		for _, c := range TypeMatrix {
			v := "NULL"
			if k > 0 && k <= len(c.Values) {
				v = c.Values[k-1] + "::" + c.PGType
			}
			vals = append(vals, v)
		}
		stmts = append(stmts, "INSERT INTO "+table+" VALUES ("+strings.Join(vals, ", ")+")")
	}
	db.Exec(t, strings.Join(stmts, ";\n"))
}
