package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
	"github.com/skippr-dev/skippr/plugins/postgres/typemap"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// typeCases is the mapping table of README.md: each column's PostgreSQL type, the Arrow type it becomes,
// and values that must survive source → Arrow → destination unchanged (NULL is added to each).
var typeCases = []struct {
	col, pgType, arrow string
	values             []string
}{
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

// TestTypesRoundTrip sends every mapped type through the snapshot and through the stream into a PostgreSQL
// destination, and compares the rows as text.
func TestTypesRoundTrip(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	var cols []string
	for _, c := range typeCases {
		cols = append(cols, c.col+" "+c.pgType)
	}
	db.Exec(t, `CREATE TYPE mood AS ENUM ('happy', 'sad');
		CREATE DOMAIN posint AS int4 CHECK (VALUE > 0);
		CREATE DOMAIN shorttext AS varchar(10);
		CREATE DOMAIN smallrange AS int4range CHECK (upper(VALUE) < 100);
		CREATE DOMAIN privnet AS inet CHECK (VALUE << '10.0.0.0/8');
		CREATE TABLE types (id int PRIMARY KEY, `+strings.Join(cols, ", ")+`);
		ALTER TABLE types REPLICA IDENTITY FULL`)
	// Row k takes value k of each column (NULL when a column has fewer), so every value appears; row 0 is all NULL.
	insert := func(base int) {
		n := 0
		for _, c := range typeCases {
			n = max(n, len(c.values))
		}
		var stmts []string
		for k := 0; k <= n; k++ {
			vals := []string{fmt.Sprint(base + k)}
			for _, c := range typeCases {
				v := "NULL"
				if k > 0 && k <= len(c.values) {
					v = c.values[k-1] + "::" + c.pgType
				}
				vals = append(vals, v)
			}
			stmts = append(stmts, "INSERT INTO types VALUES ("+strings.Join(vals, ", ")+")")
		}
		db.Exec(t, strings.Join(stmts, ";\n"))
	}
	insert(0)

	src, dst := startPlugin(t), startPlugin(t)
	srcSet := settings(db, map[string]any{"tables": []string{"types"}, "slot": slot(db)})
	dstSet := settings(db, map[string]any{"schema": "replica"})

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	streams, err := src.Discover(ctx, srcSet)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := protocol.DecodeSchema(memory.DefaultAllocator, streams[0].ArrowSchema)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range typeCases {
		t.Run(c.col, func(t *testing.T) {
			idx := sc.FieldIndices(c.col)
			if len(idx) != 1 {
				t.Fatalf("no field %s in %s", c.col, sc)
			}
			if got := sc.Field(idx[0]).Type.String(); got != c.arrow {
				t.Errorf("%s maps to %s, want %s", c.pgType, got, c.arrow)
			}
		})
	}

	p := newPipe(t, src, dst, srcSet, dstSet)
	p.start()
	p.catchUp(db, time.Minute)
	sameRows(t, db, "public.types", "replica.types")

	// The same values through the stream, as inserts and then as updates.
	insert(100)
	db.Exec(t, `UPDATE types SET c_int2 = c_int2 WHERE id >= 100`)
	p.catchUp(db, time.Minute)
	sameRows(t, db, "public.types", "replica.types")
	if p.schemas != 1 {
		t.Errorf("%d schema changes; the stream's schema must equal the snapshot's (one announcement)", p.schemas)
	}

	// The destination recreated the types it has (enums, json, varchar(n)...).
	var destTypes string
	db.QueryRow(t, []any{&destTypes}, `SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod), ', ' ORDER BY a.attnum)
		FROM pg_attribute a WHERE a.attrelid = 'replica.types'::regclass AND a.attnum > 0`)
	for _, want := range []string{"c_jsonb jsonb", "c_varchar character varying(20)", "c_enum mood", "c_enum_arr mood[]", "c_uuid uuid", "c_numeric_free numeric", "c_domain integer", "c_timetz time with time zone",
		"c_int4range int4range", "c_multirange int4multirange", "c_range_arr int4range[]", "c_range_domain int4range", "c_money money",
		"c_macaddr8 macaddr8", "c_bit bit(4)", "c_varbit bit varying", "c_xml xml", "c_tsvector tsvector", "c_point point", "c_polygon polygon", "c_circle circle"} {
		if !strings.Contains(destTypes, want) {
			t.Errorf("destination columns %q lack %q", destTypes, want)
		}
	}
}

// TestBinaryMatchesText holds the snapshot's binary decoders to the stream's text decoders: every value of the
// mapping table, read from the server in both forms, must give the same Arrow value.
func TestBinaryMatchesText(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE TYPE mood AS ENUM ('happy', 'sad');
		CREATE DOMAIN posint AS int4 CHECK (VALUE > 0);
		CREATE DOMAIN shorttext AS varchar(10);
		CREATE DOMAIN smallrange AS int4range CHECK (upper(VALUE) < 100);
		CREATE DOMAIN privnet AS inet CHECK (VALUE << '10.0.0.0/8')`)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := db.Connect(t)
	for k, v := range typemap.SessionParams {
		if _, err := conn.Exec(ctx, "SELECT set_config($1, $2, false)", k, v); err != nil {
			t.Fatal(err)
		}
	}
	extra := map[string][]string{ // edge cases of the binary forms beyond the mapping table's
		"numeric(20,4)":    {"'-0.0001'", "9999999999999999.9999", "1e15", "'12.3'"},
		"numeric(12,2)":    {"1234.56", "0.10", "'-0.01'", "9999999999.99"},
		"numeric(38,10)":   {"1234567890123456789012345678.0123456789", "'-0.0000000001'"},
		"numeric(38,0)":    {"'-99999999999999999999999999999999999999'", "10000000000000000000000000000000000000"},
		"numeric(10,5)":    {"'NaN'"},
		"timestamptz":      {"'294246-12-31 23:59:59.999999+00'", "'4713-01-01 00:00:00+00 BC'"},
		"date":             {"'4713-01-01 BC'"},
		"interval":         {"'-2147483648 days'", "'2562047788 hours'"},
		"oid":              {"4294967295"},
		"name":             {"'pg_class'"},
		"char(5)":          {"'é'"},
		"jsonb":            {`'{"ü": "日本", "n": 1.50}'`},
		"double precision": {"'-Infinity'"},
	}
	type valueCase struct{ pgType, value string }
	var cases []valueCase
	for _, c := range typeCases {
		for _, v := range c.values {
			cases = append(cases, valueCase{c.pgType, v})
		}
	}
	for typ, vals := range extra {
		for _, v := range vals {
			cases = append(cases, valueCase{typ, v})
		}
	}
	res := typemap.NewResolver()
	binaries := 0
	for _, c := range cases {
		sql := "SELECT " + c.value + "::" + c.pgType
		// The column's type as the snapshot sees it: from the result's description.
		rr := conn.PgConn().ExecParams(ctx, sql, nil, nil, nil, nil)
		fd := rr.FieldDescriptions()
		if len(fd) != 1 {
			rr.Close()
			t.Fatalf("%s: %d fields", sql, len(fd))
		}
		oid, typmod := fd[0].DataTypeOID, fd[0].TypeModifier
		rr.Close()
		typ, err := res.Resolve(ctx, conn, oid, typmod)
		if err != nil {
			t.Fatal(err)
		}
		if !typemap.Binary(typ) {
			continue
		}
		binaries++
		decodeAs := func(format int16) (string, error) {
			rr := conn.PgConn().ExecParams(ctx, sql, nil, nil, nil, []int16{format})
			var raw []byte
			for rr.NextRow() {
				raw = append([]byte(nil), rr.Values()[0]...)
			}
			if _, err := rr.Close(); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
			b := array.NewBuilder(memory.DefaultAllocator, typ.Arrow())
			defer b.Release()
			if err := typemap.Decoder(typ, b, format == 1)(raw); err != nil {
				return "", err
			}
			a := b.NewArray()
			defer a.Release()
			return a.String(), nil
		}
		text, textErr := decodeAs(0)
		bin, binErr := decodeAs(1)
		switch {
		case (textErr == nil) != (binErr == nil):
			t.Errorf("%s: text gives %q (error %v), binary %q (error %v)", sql, text, textErr, bin, binErr)
		case text != bin:
			t.Errorf("%s: text decodes to %s, binary to %s", sql, text, bin)
		}
	}
	if binaries < 50 {
		t.Fatalf("only %d values were read in binary; the mapping table has more", binaries)
	}
}
