package dest

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog/rest"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

func renameSchema(from string) *arrow.Schema {
	s := change.Schema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "v", Type: arrow.BinaryTypes.String, Nullable: true},
	}, []string{"id"})
	if from == "" {
		return s
	}
	md := s.Metadata()
	md = arrow.NewMetadata(append(md.Keys(), change.RenamedFromTableMeta), append(md.Values(), from))
	return arrow.NewSchema(s.Fields(), &md)
}

// renameRange is entries 2 and 3: a row of shop_a updated before the rename, then RENAME TABLE shop_a TO shop_b:
// stream shop_b with the marker updates, deletes and inserts rows shop_a held.
func renameRange(t *testing.T) []serve.Item {
	old, marked := renameSchema(""), renameSchema("shop_a")
	return []serve.Item{
		{Stream: "shop_a", Sequence: 2, Record: batch(t, old, r(opU, 1, "one2"))},
		{Stream: "shop_b", Sequence: 3, Schema: &serve.Stream{Name: "shop_b", Schema: marked, PrimaryKey: []string{"id"}}},
		{Stream: "shop_b", Sequence: 3, Record: batch(t, marked, r(opU, 2, "two2"), r(opD, 3, nil), r(opI, 4, "four"))},
	}
}

// TestRenamedStreamRenamesTable: after RENAME TABLE at the source, the table (and its history) is renamed in the
// catalog and takes the renamed stream's changes; a replay changes nothing; a crash after a rename and before
// the commit, replayed, ends the same. With a tiny buffer the part before the rename spills (which opens the
// table): the replay must still send it to the renamed table rather than create the old one again.
func TestRenamedStreamRenamesTable(t *testing.T) {
	cases := []struct {
		name    string
		history bool
		spill   bool
		crash   string // "": none; "commit": before shop_b's commit; "history": after the history's rename
	}{
		{name: "plain"},
		{name: "history", history: true},
		{name: "crash before commit", crash: "commit"},
		{name: "history crash before commit", history: true, crash: "commit"},
		{name: "history crash between renames", history: true, crash: "history"},
		{name: "spill crash before commit", spill: true, crash: "commit"},
		{name: "history spill crash before commit", history: true, spill: true, crash: "commit"},
		{name: "history spill crash between renames", history: true, spill: true, crash: "history"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			extra := map[string]any{}
			if tc.history {
				extra["history"] = true
			}
			e := newEnv(t, extra)
			budget := int64(0)
			if tc.spill {
				budget = 1
			}
			e.d.hooks.bufferBudget = budget
			e.apply(1, serve.Item{Stream: "shop_a", Record: batch(t, renameSchema(""), r(opI, 1, "one"), r(opI, 2, "two"), r(opI, 3, "three"))})
			req := func() serve.ApplyRequest {
				return serve.ApplyRequest{Settings: e.raw, Pipeline: e.pipeline, FirstSequence: 2, Sequence: 3, Items: renameRange(t)}
			}
			if tc.crash != "" {
				switch tc.crash {
				case "commit":
					e.d.hooks.beforeCommit = func(tbl string, _ int) error {
						if tbl == "shop_b" {
							return errCrash
						}
						return nil
					}
				case "history":
					e.d.hooks.afterRename = func(to string) error {
						if to == "shop_b_history" {
							return errCrash
						}
						return nil
					}
				}
				if _, err := e.d.Apply(ctxT(t), req()); !errors.Is(err, errCrash) {
					t.Fatalf("apply 2..3: %v, want the simulated crash", err)
				}
				// A new process starts.
				e.d.Close()
				e.d = &Destination{Version: "test", Log: testLogger(t)}
				e.d.hooks.bufferBudget = budget
				t.Cleanup(func() { e.d.Close() })
			}
			if res, err := e.d.Apply(ctxT(t), req()); err != nil || res.Skipped {
				t.Fatalf("apply 2..3: %+v, %v", res, err)
			}
			if tc.spill && e.d.spills.Load() == 0 {
				t.Fatal("the apply did not spill")
			}
			want := map[string]map[string]any{
				"1": {"id": float64(1), "v": "one2"},
				"2": {"id": float64(2), "v": "two2"},
				"4": {"id": float64(4), "v": "four"},
			}
			check := func(what string) {
				t.Helper()
				got := e.rows("shop_b", "id")
				for _, row := range got {
					maps.DeleteFunc(row, func(k string, _ any) bool { return strings.HasPrefix(k, "_skippr_") })
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("%s: shop_b holds %v, want %v", what, got, want)
				}
				for _, gone := range []string{"shop_a", "shop_a_history"} {
					if _, err := e.catalog().cat.LoadTable(ctxT(t), []string{"lake", gone}); err == nil {
						t.Fatalf("%s: table %s still exists", what, gone)
					}
				}
				if tc.history {
					if n := len(e.rows("shop_b_history", histPos, histSeq)); n != 7 {
						t.Fatalf("%s: shop_b_history holds %d changes, want 7 (3 before the range, 4 in it)", what, n)
					}
				}
				props, err := e.catalog().cat.LoadNamespaceProperties(ctxT(t), []string{"lake"})
				if err != nil {
					t.Fatal(err)
				}
				for k := range props {
					if strings.Contains(k, ".renamed-table.") {
						t.Fatalf("%s: namespace keeps the rename's intent %s", what, k)
					}
				}
				if a := e.lastApplied(); a.Sequence != 3 || a.Streams["shop_b"] != 3 || a.Streams["shop_a"] != 0 {
					t.Fatalf("%s: last applied %+v, want 3 for the pipeline and shop_b, nothing for shop_a", what, a)
				}
			}
			check("after the apply")
			snap := snapshotID(e, "shop_b")
			if res, err := e.d.Apply(ctxT(t), req()); err != nil || !res.Skipped {
				t.Fatalf("replay of 2..3: %+v, %v; want skipped", res, err)
			}
			if got := snapshotID(e, "shop_b"); got != snap {
				t.Fatalf("the replay committed to shop_b again (snapshot %d -> %d)", snap, got)
			}
			check("after the replay")
		})
	}
}

// TestRenamedStreamTableCreated: a renamed stream whose former table never existed gets its table created,
// with the rows the former stream had in the same apply (created and renamed at the source within the range).
func TestRenamedStreamTableCreated(t *testing.T) {
	e := newEnv(t, nil)
	marked := renameSchema("shop_a")
	if res, err := e.d.Apply(ctxT(t), serve.ApplyRequest{Settings: e.raw, Pipeline: e.pipeline, FirstSequence: 1, Sequence: 2, Items: []serve.Item{
		{Stream: "shop_a", Sequence: 1, Record: batch(t, renameSchema(""), r(opI, 1, "one"), r(opI, 2, "two"))},
		{Stream: "shop_b", Sequence: 2, Schema: &serve.Stream{Name: "shop_b", Schema: marked, PrimaryKey: []string{"id"}}},
		{Stream: "shop_b", Sequence: 2, Record: batch(t, marked, r(opI, 3, "three"), r(opD, 2, nil))},
	}}); err != nil || res.Skipped {
		t.Fatalf("apply 1..2: %+v, %v", res, err)
	}
	if got := e.rows("shop_b", "id"); len(got) != 2 || got["1"] == nil || got["3"] == nil {
		t.Fatalf("shop_b holds %v, want rows 1 and 3", got)
	}
	if _, err := e.catalog().cat.LoadTable(ctxT(t), []string{"lake", "shop_a"}); err == nil {
		t.Fatal("table shop_a was created")
	}
}

// TestRESTCatalogRenamedStream: the REST catalog (SeaweedFS) renames the table as the SQL catalog does.
func TestRESTCatalogRenamedStream(t *testing.T) {
	e := newRESTEnv(t, "", nil)
	e.apply(1, serve.Item{Stream: "shop_a", Record: batch(t, renameSchema(""), r(opI, 1, "one"), r(opI, 2, "two"), r(opI, 3, "three"))})
	req := serve.ApplyRequest{Settings: e.raw, Pipeline: e.pipeline, FirstSequence: 2, Sequence: 3, Items: renameRange(t)}
	if res, err := e.d.Apply(ctxT(t), req); err != nil || res.Skipped {
		t.Fatalf("apply 2..3: %+v, %v", res, err)
	}
	if got := len(e.rows("shop_b", "id")); got != 3 {
		t.Fatalf("shop_b holds %d rows, want 3", got)
	}
	if _, err := e.catalog().cat.LoadTable(ctxT(t), []string{"lake", "shop_a"}); err == nil {
		t.Fatal("table shop_a still exists")
	}
}

// TestRenameRefusedClass: a catalog that cannot rename (a REST catalog without the endpoint, or one that
// answers "not supported") fails the apply with class config, naming the catalog kind and the tables; a fault
// that a retry may mend (the network) keeps its own class.
func TestRenameRefusedClass(t *testing.T) {
	b := &applyBuffer{oc: &openCatalog{name: "rest catalog http://x"}, s: Settings{Catalog: CatalogSettings{Type: "rest"}}}
	for _, c := range []struct {
		name   string
		err    error
		config bool
	}{
		{"endpoint not offered", fmt.Errorf("%w: POST /v1/{prefix}/tables/rename", rest.ErrEndpointNotSupported), true},
		{"not implemented", iceberg.ErrNotImplemented, true},
		{"server says not supported", errors.New("rename is not supported by this catalog"), true},
		{"network", errors.New("dial tcp: connection refused"), false},
	} {
		err := b.renameRefused("shop_a", "shop_b", c.err)
		if got := fault.ClassOf(err) == fault.Config; got != c.config {
			t.Errorf("%s: class %v, want config %v (%v)", c.name, fault.ClassOf(err), c.config, err)
		}
		if c.config && (!strings.Contains(fault.FixOf(err), "rest catalog") || !strings.Contains(fault.FixOf(err), "shop_a")) {
			t.Errorf("%s: the fix %q names neither the catalog kind nor the table", c.name, fault.FixOf(err))
		}
	}
}
