package dest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/plugin-sdk/values"
	"github.com/skippr-dev/skippr/plugins/bigquery/gsql"
	"github.com/skippr-dev/skippr/testkit/bigquerytest"
)

var errCrash = errors.New("simulated crash")

// TestRenamedStreamRenamesTable: after RENAME TABLE a TO b at the source, stream b (schema metadata
// skippr.renamed_from_table = a) finds a's table renamed to b's (ALTER TABLE … RENAME TO, outside the
// transaction), with its history and its pending fill: b holds every row, a's table and state row are gone; a
// replay of the range is skipped; a crash after a rename and before the commit, replayed by a new process,
// ends the same.
func TestRenamedStreamRenamesTable(t *testing.T) {
	cases := []struct {
		name    string
		history bool
		crash   string // "": none; "commit": the transaction is cancelled after the renames; "history": a crash after the history's rename
	}{
		{name: "plain"},
		{name: "history", history: true},
		{name: "crash before commit", crash: "commit"},
		{name: "history crash before commit", history: true, crash: "commit"},
		{name: "history crash between renames", history: true, crash: "history"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := bigquerytest.Start(t, project)
			raw := settings(s)
			if tc.history {
				var m map[string]any
				if err := json.Unmarshal(raw, &m); err != nil {
					t.Fatal(err)
				}
				m["history"] = true
				if raw, _ = json.Marshal(m); raw == nil {
					t.Fatal("settings")
				}
			}
			d := serve.NewSessions(&Destination{})
			t.Cleanup(func() { d.Close() })
			const a, b = "shop.a", "shop.b"
			// s1 is a's schema; s2 adds a column with a value for a's existing rows (a fill pending when the
			// range renames the table); s3 is b's, marked as renamed from a.
			s1 := change.Schema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "v", Type: arrow.BinaryTypes.String, Nullable: true}}, []string{"id"})
			grade := arrow.Field{Name: "grade", Type: arrow.PrimitiveTypes.Int64, Nullable: true, Metadata: arrow.NewMetadata([]string{values.MetaExistingRows}, []string{"7"})}
			s2 := change.Schema(append(change.DataFields(s1), grade), []string{"id"})
			md := s2.Metadata()
			md = arrow.NewMetadata(append(md.Keys(), change.RenamedFromTableMeta), append(md.Values(), a))
			s3 := arrow.NewSchema(s2.Fields(), &md)
			rows := func(s *arrow.Schema, op change.Op, rs ...[]any) arrow.RecordBatch {
				bl := change.NewBuilder(memory.DefaultAllocator, s)
				defer bl.Release()
				for _, r := range rs {
					bl.Field(0).(*array.Int64Builder).Append(r[0].(int64))
					if r[1] == nil {
						bl.Field(1).AppendNull()
					} else {
						bl.Field(1).(*array.StringBuilder).Append(r[1].(string))
					}
					if len(change.DataFields(s)) > 2 {
						bl.Field(2).AppendNull()
					}
					bl.Row(op, "")
				}
				return bl.NewBatch()
			}
			r1 := rows(s1, change.OpInsert, []any{int64(1), "one"}, []any{int64(2), "two"}, []any{int64(3), "three"})
			defer r1.Release()
			apply(t, d, raw, 1, 1, serve.Item{Stream: a, Schema: &serve.Stream{Name: a, Schema: s1}, Sequence: 1}, serve.Item{Stream: a, Record: r1, Sequence: 1})
			// Entry 2 updates a row of a, then adds grade to a; its apply is cancelled after the patch, so the
			// fill of a's rows is pending. Entry 3 updates a row of a, then RENAME TABLE a TO b: b updates,
			// deletes and inserts.
			r2 := rows(s1, change.OpUpdate, []any{int64(1), "one2"})
			defer r2.Release()
			r2b := rows(s2, change.OpUpdate, []any{int64(2), "two2"})
			defer r2b.Release()
			r3 := rows(s3, change.OpUpdate, []any{int64(2), "two3"})
			defer r3.Release()
			r3b := rows(s3, change.OpDelete, []any{int64(3), nil})
			defer r3b.Release()
			r3c := rows(s3, change.OpInsert, []any{int64(4), "four"})
			defer r3c.Release()
			// a's last change and b's first share entry 3: one history table, one count of _skippr_seq.
			entry2 := []serve.Item{{Stream: a, Record: r2, Sequence: 2}, {Stream: a, Schema: &serve.Stream{Name: a, Schema: s2}, Sequence: 2}}
			rng := append(entry2[:2:2], serve.Item{Stream: a, Record: r2b, Sequence: 3}, serve.Item{Stream: b, Schema: &serve.Stream{Name: b, Schema: s3}, Sequence: 3},
				serve.Item{Stream: b, Record: r3, Sequence: 3}, serve.Item{Stream: b, Record: r3b, Sequence: 3}, serve.Item{Stream: b, Record: r3c, Sequence: 3})
			req := func(first uint64, items []serve.Item) serve.ApplyRequest {
				return serve.ApplyRequest{Settings: raw, Pipeline: "orders", FirstSequence: first, Sequence: 3, Items: items}
			}
			release := s.Mutate("analytics", gsql.StateTable("orders"))
			if _, _, err := applyStats(d, serve.ApplyRequest{Settings: raw, Pipeline: "orders", FirstSequence: 2, Sequence: 2, Items: entry2}); err == nil {
				t.Fatal("the apply whose transaction was cancelled succeeded")
			}
			release()
			dest := &Destination{}
			d = serve.NewSessions(dest)
			t.Cleanup(func() { d.Close() })
			if tc.crash != "" {
				switch tc.crash {
				case "commit":
					release = s.Mutate("analytics", gsql.StateTable("orders"))
				case "history":
					release = func() {}
					dest.afterRename = func(to string) error {
						if to == "b_history" {
							return errCrash
						}
						return nil
					}
				}
				_, _, err := applyStats(d, req(2, rng))
				release()
				if err == nil {
					t.Fatal("the apply meant to crash succeeded")
				}
				d = serve.NewSessions(&Destination{})
				t.Cleanup(func() { d.Close() })
			}
			if res, _ := apply(t, d, raw, 2, 3, rng...); res.Skipped {
				t.Fatal("apply 2..3 skipped")
			}
			query := func(q string) []string {
				t.Helper()
				r, err := s.Pool().Query(context.Background(), q)
				if err != nil {
					t.Fatal(err)
				}
				defer r.Close()
				var out []string
				for r.Next() {
					var l string
					if err := r.Scan(&l); err != nil {
						t.Fatal(err)
					}
					out = append(out, l)
				}
				return out
			}
			check := func(what string) {
				t.Helper()
				if got, want := strings.Join(query(`SELECT concat_ws('|', id, v, coalesce(grade::text, '-')) FROM analytics.b ORDER BY id`), " "), "1|one2|7 2|two3|- 4|four|-"; got != want {
					t.Fatalf("%s: b holds %s, want %s", what, got, want)
				}
				if got := query(`SELECT table_name::text FROM information_schema.tables WHERE table_schema = 'analytics' AND table_name IN ('a', 'a_history') ORDER BY 1`); len(got) != 0 {
					t.Fatalf("%s: tables %v still exist", what, got)
				}
				if got := query(fmt.Sprintf(`SELECT concat_ws('|', tbl, col) FROM analytics.%q`, gsql.FillTable("orders"))); len(got) != 0 {
					t.Fatalf("%s: the fill table keeps %v", what, got)
				}
				if tc.history {
					if got := query(`SELECT concat_ws('|', _skippr_position, _skippr_seq) FROM analytics.b_history ORDER BY 1`); len(got) != 8 {
						t.Fatalf("%s: the history holds %v, want 8 changes (3 before the range, 5 in it)", what, got)
					} else if dup := map[string]bool{}; true {
						for _, k := range got {
							if dup[k] {
								t.Fatalf("%s: the history holds (position, seq) %s twice: %v", what, k, got)
							}
							dup[k] = true
						}
					}
				}
				st, err := d.LastApplied(context.Background(), raw, "orders")
				if err != nil || st.Sequence != 3 || st.Streams[b] != 3 {
					t.Fatalf("%s: LastApplied %+v, %v; want 3 for the pipeline and %s", what, st, err, b)
				}
				if _, ok := st.Streams[a]; ok {
					t.Fatalf("%s: LastApplied keeps the renamed stream %s: %+v", what, a, st)
				}
			}
			check("after the apply")
			if res, _ := apply(t, d, raw, 2, 3, rng...); !res.Skipped {
				t.Fatal("replay of 2..3 not skipped")
			}
			check("after the replay")
		})
	}
}
