package dest

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/plugin-sdk/values"
	"github.com/skippr-dev/skippr/plugins/snowflake/sfsql"
)

var errCrash = errors.New("simulated crash")

// TestRenamedStreamRenamesTable: after RENAME TABLE a TO b at the source, stream b (schema metadata
// skippr.renamed_from_table = a) finds a's table renamed to b's, with its history and its pending fill: b holds
// every row, a's table and state row are gone; a replay of the range is skipped; a crash after a rename and
// before the commit, replayed by a new process, ends the same. With a small fold budget a's part of the range is
// staged in an earlier chunk, before the rename, and must follow the table.
func TestRenamedStreamRenamesTable(t *testing.T) {
	cases := []struct {
		name    string
		history bool
		chunks  bool
		crash   string // "": none; "commit": the state MERGE fails after the renames; "history": a crash after the history's rename
	}{
		{name: "plain"},
		{name: "history", history: true},
		{name: "chunks", chunks: true},
		{name: "crash before commit", crash: "commit"},
		{name: "history crash before commit", history: true, crash: "commit"},
		{name: "history crash between renames", history: true, crash: "history"},
		{name: "chunks crash before commit", chunks: true, crash: "commit"},
		{name: "history chunks crash before commit", history: true, chunks: true, crash: "commit"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tg := newTarget(t, func(s *Settings) { s.History = tc.history })
			if tg.standin == nil && tc.crash != "" {
				t.Skip("the crash is simulated by the stand-in")
			}
			a, b := tg.stream("shop.a"), tg.stream("shop.b")
			// s1 is a's schema; s2 adds a column with a value for a's existing rows (a fill pending when the
			// range renames the table); s3 is b's, marked as renamed from a.
			s1 := change.Schema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "v", Type: arrow.BinaryTypes.String, Nullable: true}}, []string{"id"})
			grade := arrow.Field{Name: "grade", Type: arrow.PrimitiveTypes.Int64, Nullable: true, Metadata: arrow.NewMetadata([]string{values.MetaExistingRows}, []string{"7"})}
			s2 := change.Schema(append(change.DataFields(s1), grade), []string{"id"})
			md := s2.Metadata()
			md = arrow.NewMetadata(append(md.Keys(), change.RenamedFromTableMeta), append(md.Values(), a))
			s3 := arrow.NewSchema(s2.Fields(), &md)
			rows := func(s *arrow.Schema, op change.Op, rs ...[]any) arrow.RecordBatch {
				bl := change.NewBuilder(mem, s)
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
			tg.apply(1, 1, serve.Item{Stream: a, Schema: &serve.Stream{Name: a, Schema: s1}, Sequence: 1}, item(a, 1, r1))
			// The range: entry 2 updates a row of a, then adds grade to a, and the apply dies after the ALTER:
			// the fill of a's rows is pending. Entry 3 updates a row of a, then RENAME TABLE a TO b: b updates,
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
			// a's last change and b's first share entry 3: one history table, one count of _SKIPPR_SEQ.
			entry2 := []serve.Item{item(a, 2, r2), {Stream: a, Schema: &serve.Stream{Name: a, Schema: s2}, Sequence: 2}}
			rng := append(entry2[:2:2], item(a, 3, r2b), serve.Item{Stream: b, Schema: &serve.Stream{Name: b, Schema: s3}, Sequence: 3}, item(b, 3, r3), item(b, 3, r3b), item(b, 3, r3c))
			restart := func() {
				tg.d.Close()
				tg.dest = &Destination{TempDir: t.TempDir()}
				tg.d = serve.NewSessions(tg.dest)
				if tc.chunks {
					tg.dest.FoldBudget = 1
				}
			}
			if tg.standin != nil {
				// Entry 2 alone first, failing at its commit: grade is added and its fill recorded, not done.
				tg.standin.FailNext(`"_SKIPPR_STATE" AS t USING`, 630, "57014", "Statement reached its statement or warehouse timeout of 60 second(s) and was canceled.")
				if _, err := tg.d.Apply(tctx(t), serve.ApplyRequest{Settings: tg.settings, Pipeline: tg.pipeline, FirstSequence: 2, Sequence: 2, Items: entry2}); err == nil {
					t.Fatal("the apply whose state MERGE failed succeeded")
				}
			}
			restart()
			switch tc.crash {
			case "commit":
				tg.standin.FailNext(`"_SKIPPR_STATE" AS t USING`, 630, "57014", "Statement reached its statement or warehouse timeout of 60 second(s) and was canceled.")
			case "history":
				tg.dest.afterRename = func(to string) error {
					if to == historyTable(tg.table(b)).Name {
						return errCrash
					}
					return nil
				}
			}
			if tc.crash != "" {
				if _, err := tg.d.Apply(tctx(t), serve.ApplyRequest{Settings: tg.settings, Pipeline: tg.pipeline, FirstSequence: 2, Sequence: 3, Items: rng}); err == nil {
					t.Fatal("the apply meant to crash succeeded")
				}
				restart()
			}
			if res := tg.apply(2, 3, rng...); res.Skipped {
				t.Fatal("apply 2..3 skipped")
			}
			check := func(what string) {
				t.Helper()
				got := map[string]string{}
				for id, r := range tg.rows(TableName(b)) {
					got[id] = fmt.Sprintf("%v %v", r["V"], r["GRADE"])
				}
				want := map[string]string{"1": "one2 7", "2": "two3 <nil>", "4": "four <nil>"}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("%s: %s holds %v, want %v", what, TableName(b), got, want)
				}
				if tg.standin != nil {
					for _, gone := range []string{TableName(a), TableName(a) + sfsql.HistorySuffix} {
						if _, err := tg.standin.Rows(tctx(t), gone); err == nil {
							t.Fatalf("%s: table %s still exists", what, gone)
						}
					}
					if fills, err := tg.standin.Rows(tctx(t), sfsql.FillTable); err != nil || len(fills) != 0 {
						t.Fatalf("%s: %s keeps %v (%v)", what, sfsql.FillTable, fills, err)
					}
				}
				if tc.history {
					hist, err := tg.list(tctx(t), TableName(b)+sfsql.HistorySuffix)
					if err != nil || len(hist) != 8 {
						t.Fatalf("%s: the history holds %d changes (%v), want 8 (3 before the range, 5 in it)", what, len(hist), err)
					}
					keys := map[string]bool{}
					for _, h := range hist {
						k := fmt.Sprint(h[sfsql.PositionColumn], "/", h[sfsql.SeqColumn])
						if keys[k] {
							t.Fatalf("%s: the history holds (position, seq) %s twice: %v", what, k, hist)
						}
						keys[k] = true
					}
				}
				st, err := tg.d.LastApplied(tctx(t), tg.settings, tg.pipeline)
				if err != nil || st.Sequence != 3 || st.Streams[b] != 3 {
					t.Fatalf("%s: LastApplied %+v, %v; want 3 for the pipeline and %s", what, st, err, b)
				}
				if _, ok := st.Streams[a]; ok {
					t.Fatalf("%s: LastApplied keeps the renamed stream %s: %+v", what, a, st)
				}
			}
			check("after the apply")
			if res := tg.apply(2, 3, rng...); !res.Skipped {
				t.Fatal("replay of 2..3 not skipped")
			}
			check("after the replay")
		})
	}
}

func (tg *target) table(stream string) sfsql.Table {
	return (&conn{s: tg.s}).table(TableName(stream))
}
