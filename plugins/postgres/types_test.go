package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
	"github.com/skippr-dev/skippr/plugins/postgres/typemap"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// typeCases is the mapping table of README.md (shared with cmd/skippr's Iceberg and skippr query legs): each
// column's PostgreSQL type, the Arrow type it becomes, and values that must survive source → Arrow →
// destination unchanged (NULL is added to each).
var typeCases = pgtest.TypeMatrix

// TestTypesRoundTrip sends every mapped type through the snapshot and through the stream into a PostgreSQL
// destination, and compares the rows as text.
func TestTypesRoundTrip(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	db.Exec(t, pgtest.TypeMatrixDDL+`;
		CREATE TABLE types (id int PRIMARY KEY, `+pgtest.TypeMatrixColumns()+`);
		ALTER TABLE types REPLICA IDENTITY FULL`)
	insert := func(base int) { db.InsertTypeMatrix(t, "types", base) }
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
		t.Run(c.Col, func(t *testing.T) {
			idx := sc.FieldIndices(c.Col)
			if len(idx) != 1 {
				t.Fatalf("no field %s in %s", c.Col, sc)
			}
			if got := sc.Field(idx[0]).Type.String(); got != c.Arrow {
				t.Errorf("%s maps to %s, want %s", c.PGType, got, c.Arrow)
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
	db.Exec(t, pgtest.TypeMatrixDDL)
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
		for _, v := range c.Values {
			cases = append(cases, valueCase{c.PGType, v})
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
