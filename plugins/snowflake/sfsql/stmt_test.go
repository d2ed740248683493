package sfsql

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/skippr-dev/skippr/testkit/snowflaketest"
)

var update = flag.Bool("update", false, "rewrite testdata/statements.golden")

// statements builds one of every statement the destination emits, over names that need quoting and every
// type of the mapping.
func statements(t *testing.T) []string {
	t.Helper()
	var cols []Column
	for _, f := range []arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "Mixed Case \"name\"", Type: arrow.BinaryTypes.String},
		{Name: "amount", Type: &arrow.Decimal128Type{Precision: 12, Scale: 2}},
		{Name: "ratio", Type: arrow.PrimitiveTypes.Float64},
		{Name: "ok", Type: arrow.FixedWidthTypes.Boolean},
		{Name: "raw", Type: arrow.BinaryTypes.Binary},
		{Name: "day", Type: arrow.FixedWidthTypes.Date32},
		{Name: "at_time", Type: arrow.FixedWidthTypes.Time64us},
		{Name: "local_ts", Type: &arrow.TimestampType{Unit: arrow.Microsecond}},
		{Name: "ts", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}},
		{Name: "attrs", Type: arrow.StructOf(arrow.Field{Name: "a", Type: arrow.PrimitiveTypes.Int32})},
		{Name: "tags", Type: arrow.ListOf(arrow.BinaryTypes.String)},
		{Name: "props", Type: arrow.MapOf(arrow.BinaryTypes.String, arrow.BinaryTypes.String)},
	} {
		ty, err := Of(f.Type)
		if err != nil {
			t.Fatal(err)
		}
		cols = append(cols, Column{Name: Name(f.Name), Type: ty})
	}
	tbl := Table{Database: "ANALYTICS", Schema: "RAW", Name: Name("orders")}
	odd := Table{Database: "ANALYTICS", Schema: "RAW", Name: Name("Order Lines")}
	stage := Table{Database: "ANALYTICS", Schema: "RAW", Name: "_SKIPPR_STAGE_1"}
	boolean, ts := Type{Base: "BOOLEAN"}, Type{Base: "TIMESTAMP_TZ"}
	metaCols := []Column{{Name: DeletedColumn, Type: boolean, DefaultFalse: true}, {Name: SyncedAtColumn, Type: ts},
		{Name: SourceCommittedAtColumn, Type: ts}, {Name: OpColumn, Type: Type{Base: "TEXT"}}, {Name: PositionColumn, Type: Type{Base: "NUMBER", Precision: 20}}}
	metaStaged := []Column{{Name: DeletedColumn, Type: boolean}, {Name: KeyOnlyColumn, Type: boolean}, {Name: OpNameColumn, Type: Type{Base: "TEXT"}},
		{Name: SourceCommittedAtColumn, Type: ts}, {Name: PositionColumn, Type: Type{Base: "NUMBER", Precision: 20}}, {Name: SeqColumn, Type: Type{Base: "NUMBER", Precision: 10}}}
	meta := Meta{Sets: []Set{{DeletedColumn, Staged(DeletedColumn)}, {SyncedAtColumn, TimestampLiteral(time.Date(2026, 12, 7, 1, 2, 3, 456789000, time.FixedZone("x", 3600)))},
		{SourceCommittedAtColumn, Staged(SourceCommittedAtColumn)}, {OpColumn, Staged(OpNameColumn)}, {PositionColumn, Staged(PositionColumn)}}}
	return []string{
		Begin("SKIPPR_0123456789ABCDEF"), "COMMIT", "ROLLBACK", "SELECT CURRENT_ROLE()", "SELECT CURRENT_SESSION()",
		"SHOW TRANSACTIONS", AbortTransaction("1712345678901000000"),
		UseWarehouse("LOAD_WH"), UseDatabase("ANALYTICS"), UseSchema("ANALYTICS", "RAW"),
		CreateState("ANALYTICS", "RAW"),
		ReadState("ANALYTICS", "RAW"),
		Columns("ANALYTICS"),
		CreateTable(tbl, cols, []string{"ID"}),
		CreateTable(odd, cols[:2], []string{"ID", cols[1].Name}),
		CreateTable(odd, cols[:2], nil),
		AddColumn(tbl, cols[11]),
		RenameColumn(tbl, "QTY", "AMOUNT"),
		RenameColumn(odd, "Old Name", "New Name"),
		RenameTable(tbl, "CUSTOMER_ORDERS"),
		RenameTable(odd, "Old Order Lines"),
		AlterType(tbl, Column{Name: "AMOUNT", Type: Type{Base: "NUMBER", Precision: 38, Scale: 2}}),
		Put("/tmp/skippr-snowflake-1/p__public.orders__7__0.parquet", tbl),
		Put("/tmp/skippr-snowflake-1/skippr_check.txt", Table{"ANALYTICS", "RAW", StateTable}),
		RemoveFile(Table{"ANALYTICS", "RAW", StateTable}, "skippr_check.txt"),
		CreateStaging(stage, cols, nil),
		CreateStaging(stage, cols[:1], metaStaged),
		CreateTable(tbl, append(cols[:2:2], metaCols...), []string{"ID"}),
		CreateTable(Table{"ANALYTICS", "RAW", "ORDERS" + HistorySuffix}, append(cols[:2:2], Column{Name: OpColumn, Type: Type{Base: "TEXT"}}, metaStaged[3], metaStaged[4], metaStaged[5]), []string{PositionColumn, SeqColumn}),
		AddColumn(tbl, metaCols[0]),
		AddColumn(tbl, metaCols[1]),
		Copy(stage, tbl, "p__public.orders__7__0.parquet"),
		Merge(tbl, stage, cols, []string{"ID"}, 3, Meta{}),
		Merge(odd, stage, cols[:2], []string{"ID", cols[1].Name}, 3, Meta{}),
		Merge(odd, stage, cols[:1], []string{"ID"}, 3, Meta{}),
		Merge(tbl, stage, []Column{{Name: "ID", Type: cols[0].Type}, {Name: "AMOUNT", Type: cols[1].Type, Staged: "QTY"}}, []string{"ID"}, 3, Meta{}),
		Merge(tbl, stage, cols, []string{"ID"}, 3, meta),
		Merge(tbl, stage, cols[:1], []string{"ID"}, 3, meta),
		Merge(tbl, stage, cols, []string{"ID"}, 3, Meta{SoftDelete: true, Sets: meta.Sets}),
		Merge(odd, stage, cols[:1], []string{"ID"}, 3, Meta{SoftDelete: true, Sets: meta.Sets[:1]}),
		Append(odd, stage, cols, Meta{}),
		Append(tbl, stage, cols, meta),
		UpsertState("ANALYTICS", "RAW", 1),
		UpsertState("ANALYTICS", "RAW", 3),
		DeleteState("ANALYTICS", "RAW"),
		DeleteAll(tbl),
		CreateFill("ANALYTICS", "RAW"),
		ReadFills("ANALYTICS", "RAW"),
		InsertFill("ANALYTICS", "RAW"),
		DeleteFill("ANALYTICS", "RAW"),
		TryCast(cols[2].Type),
		TryCast(cols[9].Type),
		Fill(tbl, cols[2]),
		Fill(odd, cols[1]),
	}
}

// TestStatementsFollowSnowflakeGrammar: every statement shape the destination emits matches a rule of the
// allow-list written from Snowflake's documentation (testkit/snowflaketest/grammar.go), and the statements
// are exactly the reviewed ones in testdata/statements.golden (go test -run Golden -update rewrites it).
func TestStatementsFollowSnowflakeGrammar(t *testing.T) {
	stmts := statements(t)
	for _, s := range stmts {
		if _, err := snowflaketest.Allowed(s); err != nil {
			t.Errorf("%v", err)
		}
	}
	golden := filepath.Join("testdata", "statements.golden")
	got := strings.Join(stmts, "\n") + "\n"
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if got != string(want) {
		t.Errorf("statements differ from %s (review, then -update):\n%s", golden, got)
	}
}

func TestTypes(t *testing.T) {
	for _, c := range []struct {
		dt   arrow.DataType
		want string
	}{
		{arrow.PrimitiveTypes.Int16, "NUMBER(38,0)"},
		{arrow.PrimitiveTypes.Uint64, "NUMBER(38,0)"},
		{&arrow.Decimal128Type{Precision: 20, Scale: 5}, "NUMBER(38,5)"},
		{&arrow.Decimal128Type{Precision: 38, Scale: 38}, "NUMBER(38,37)"}, // NUMBER's scale is at most 37
		{arrow.PrimitiveTypes.Float32, "FLOAT"},
		{arrow.BinaryTypes.LargeString, "VARCHAR"},
		{arrow.BinaryTypes.Binary, "BINARY"},
		{arrow.FixedWidthTypes.Date32, "DATE"},
		{arrow.FixedWidthTypes.Time64ns, "TIME(9)"},
		{&arrow.TimestampType{Unit: arrow.Nanosecond}, "TIMESTAMP_NTZ(9)"},
		{&arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "Europe/Paris"}, "TIMESTAMP_TZ(9)"},
		{arrow.StructOf(arrow.Field{Name: "a", Type: arrow.PrimitiveTypes.Int8}), "OBJECT"},
		{arrow.MapOf(arrow.BinaryTypes.String, arrow.PrimitiveTypes.Int8), "OBJECT"},
		{arrow.ListOf(arrow.PrimitiveTypes.Int8), "ARRAY"},
	} {
		got, err := Of(c.dt)
		if err != nil || got.DDL() != c.want {
			t.Errorf("%s: %s, %v; want %s", c.dt, got.DDL(), err, c.want)
		}
	}
	if _, err := Of(&arrow.Decimal256Type{Precision: 60, Scale: 2}); err == nil {
		t.Error("decimal256(60,2) mapped; Snowflake's NUMBER holds 38 digits")
	}
	for _, c := range []struct {
		have, want Type
		alter, ok  bool
	}{
		{Type{"NUMBER", 38, 0}, Type{"NUMBER", 38, 0}, false, true},
		{Type{"NUMBER", 10, 2}, Type{"NUMBER", 38, 2}, true, true},
		{Type{"NUMBER", 38, 2}, Type{"NUMBER", 38, 3}, false, false},
		{Type{"NUMBER", 38, 0}, Type{Base: "FLOAT"}, false, false},
		{Type{Base: "TEXT"}, Type{Base: "TEXT"}, false, true},
		{Type{Base: "VARIANT"}, Type{Base: "OBJECT"}, false, true},
		{Type{Base: "TIMESTAMP_NTZ"}, Type{Base: "TIMESTAMP_TZ"}, false, false},
	} {
		alter, ok := Widen(c.have, c.want)
		if ok != c.ok || (alter != nil) != c.alter {
			t.Errorf("widen %s to %s: alter %v ok %v; want alter %v ok %v", c.have, c.want, alter, ok, c.alter, c.ok)
		}
	}
}

func TestName(t *testing.T) {
	for in, want := range map[string]string{"orders": "ORDERS", "Order_2": "ORDER_2", "Order Lines": "Order Lines", "ünï": "ünï", "a-b": "a-b"} {
		if got := Name(in); got != want {
			t.Errorf("Name(%q) = %q, want %q", in, got, want)
		}
	}
	if got := Literal(`it's a \ test`); got != `'it''s a \\ test'` {
		t.Errorf("Literal: %s", got)
	}
}
