package gsql

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skippr-dev/skippr/plugin-sdk/rowmeta"

	"github.com/skippr-dev/skippr/testkit/bigquerytest"
)

var update = flag.Bool("update", false, "rewrite testdata/statements.golden")

func stageCol(i int) string { return "c" + string(rune('0'+i)) }

// statements is every shape the plugin emits, for a table with a composite key, awkward names, and a keyless
// table.
func statements() map[string]string {
	target := Table{Project: "my-project-1", Dataset: "analytics", Name: "orders"}
	stage := Table{Project: "my-project-1", Dataset: "analytics", Name: "_skippr_stage_orders_0a1b2c3d4e5f"}
	state := Table{Project: "my-project-1", Dataset: "analytics", Name: StateTable("orders")}
	cols := []string{"tenant", "id", "order date", "select", "we`ird\\name"}
	return map[string]string{
		"merge":                  Merge(target, stage, cols, []int{0, 1}, stageCol),
		"merge_key_only":         Merge(target, stage, []string{"id"}, []int{0}, stageCol),
		"append":                 Append(target, stage, cols, stageCol),
		"truncate":               Truncate(target),
		"merge_meta":             MergeMeta(target, stage, cols, []int{0, 1}, stageCol, rowmeta.Options{SyncedAt: true, SourceCommittedAt: true, Op: true, Position: true}),
		"merge_soft_delete":      MergeMeta(target, stage, cols, []int{1}, stageCol, rowmeta.Options{SoftDelete: true, Op: true}),
		"merge_key_only_deletes": MergeKeyOnlyDeletes(target, stage, cols, []int{1}, stageCol, rowmeta.Options{SoftDelete: true, SyncedAt: true, SourceCommittedAt: true, Op: true, Position: true}),
		"append_meta":            AppendMeta(target, stage, cols, stageCol, rowmeta.Options{SoftDelete: true, SyncedAt: true, SourceCommittedAt: true, Op: true, Position: true}),
		"transaction_at":         TransactionAt([]string{AssertFence(state), MergeMeta(target, stage, cols, []int{1}, stageCol, rowmeta.Options{SyncedAt: true}), SetState(state)}),
		"append_history":         AppendHistory(Table{Project: "my-project-1", Dataset: "analytics", Name: HistoryTable("orders")}, stage, cols, stageCol),
		"rename column":          RenameColumn(target, "qty", "order amount"),
		"rename table":           RenameTable(target, "customer orders"),
		"delete_state":           DeleteState(state, "gone_0"),
		"assert_fence":           AssertFence(state),
		"set_state":              SetState(state),
		"read_state":             ReadState(state),
		"read_fills":             ReadFills(Table{Project: "my-project-1", Dataset: "analytics", Name: FillTable("orders")}),
		"record_fill":            RecordFill(Table{Project: "my-project-1", Dataset: "analytics", Name: FillTable("orders")}),
		"drop_fill":              DropFill(Table{Project: "my-project-1", Dataset: "analytics", Name: FillTable("orders")}, "fill_0"),
		"can_cast":               CanCast("TIMESTAMP"),
		"fill":                   Fill(target, "order date", "DATE", "fill_0"),
		"transaction":            Transaction([]string{AssertFence(state), Truncate(target), Merge(target, stage, cols, []int{1}, stageCol), SetState(state)}),
	}
}

// TestStatementsGolden pins each statement's text (go test -update rewrites the file after a deliberate
// change) and parses each with the grammar the stand-in enforces, written from BigQuery's reference pages.
func TestStatementsGolden(t *testing.T) {
	st := statements()
	var names []string
	for n := range st {
		names = append(names, n)
	}
	slicesSort(names)
	var b strings.Builder
	for _, n := range names {
		b.WriteString("-- " + n + "\n" + st[n] + "\n\n")
		if _, err := bigquerytest.Parse(st[n]); err != nil {
			t.Errorf("%s is outside the GoogleSQL grammar: %v\n%s", n, err, st[n])
		}
	}
	path := filepath.Join("testdata", "statements.golden")
	if *update {
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update once)", err)
	}
	if b.String() != string(want) {
		t.Fatalf("statements differ from %s (go test -update if the change is deliberate):\n%s", path, b.String())
	}
}

func TestIdentEscapes(t *testing.T) {
	for in, want := range map[string]string{"a": "`a`", "a b": "`a b`", "a`b": "`a\\`b`", `a\b`: "`a\\\\b`"} {
		if got := Ident(in); got != want {
			t.Errorf("Ident(%q) = %s, want %s", in, got, want)
		}
	}
}

func slicesSort(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}
