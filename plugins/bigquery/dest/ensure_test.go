package dest

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/testkit/bigquerytest"
)

// TestApplyFindsItsTableCreated: an apply whose table appears without its own create succeeding takes the
// table as it finds it, adding the columns it lacks, whatever made it.
//
//   - kill: the process applying the entry was killed while BigQuery created the table (test/chaos found it:
//     the restarted sync's create failed on the table there, a config fault that stopped the pipeline). The
//     apply's context is cancelled while the stand-in creates the table, as a SIGKILL closes its connection,
//     and the create completes as BigQuery completes a request it received (bigquerytest.CreateAbandoned).
//     The next process applies the same entry.
//   - race: another process creates the table after this apply looked it up and before it creates it (409
//     duplicate), with one column less than this apply's rows have.
func TestApplyFindsItsTableCreated(t *testing.T) {
	for _, tc := range []struct {
		name    string
		race    bool // else kill
		history bool
		table   string // the table made behind the apply's back
	}{
		{name: "kill", table: "orders"},
		{name: "kill_history", history: true, table: "orders_history"},
		{name: "race", race: true, table: "orders"},
		{name: "race_history", race: true, history: true, table: "orders_history"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s := bigquerytest.Start(t, project)
			raw, err := json.Marshal(map[string]any{"project": s.Project, "dataset": "analytics", "endpoint": s.URL, "history": tc.history})
			if err != nil {
				t.Fatal(err)
			}
			check := serve.NewSessions(&Destination{})
			t.Cleanup(func() { check.Close() })
			if err := check.Check(ctx, raw); err != nil { // makes the dataset
				t.Fatalf("check: %v", err)
			}
			first := []serve.Item{{Stream: "public.orders", Record: batch(t, false, row{op: change.OpInsert, id: 1, name: "a"}, row{op: change.OpInsert, id: 2, name: "b"}), Sequence: 1}}
			want := []string{`1|a|1.26|[]|{"k": 1}|2026-01-01 00:00:01|`, `2|b|2.51|[]|{"k": 2}|2026-01-01 00:00:02|`}
			items, history := first, 2
			dest := &Destination{}
			if tc.race {
				b := batch(t, true, row{op: change.OpInsert, id: 3, name: "c", note: "n"})
				items = []serve.Item{{Stream: "public.orders", Schema: &serve.Stream{Name: "public.orders", Schema: b.Schema()}, Sequence: 1}, {Stream: "public.orders", Record: b, Sequence: 1}}
				want, history = append(want, `3|c|3.76|[]|{"k": 3}|2026-01-01 00:00:03|n`), 3
				other := serve.NewSessions(&Destination{})
				t.Cleanup(func() { other.Close() })
				raced := false
				dest.beforeCreate = func(table string) {
					if table == tc.table && !raced {
						raced = true
						// At a position of its own: the history table's key is (position, seq).
						items := []serve.Item{{Stream: first[0].Stream, Record: first[0].Record, Sequence: 7}}
						if _, _, err := applyStats(other, serve.ApplyRequest{Settings: raw, Pipeline: "other", FirstSequence: 7, Sequence: 7, Items: items}); err != nil {
							t.Errorf("the other process's apply: %v", err)
						}
					}
				}
			} else {
				kill(t, s, raw, tc.table, first)
			}

			d := serve.NewSessions(dest)
			t.Cleanup(func() { d.Close() })
			apply(t, d, raw, 1, 1, items...)
			if got := dump(t, s, "orders", tc.race); strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Fatalf("after the apply:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			if tc.history {
				var n int
				if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM analytics.orders_history`).Scan(&n); err != nil || n != history {
					t.Fatalf("the history holds %d rows (%v); want %d", n, err, history)
				}
			}
		})
	}
}

// kill applies items in a process killed while the stand-in creates table, and returns when the create has
// completed without it.
func kill(t *testing.T, s *bigquerytest.Server, raw json.RawMessage, table string, items []serve.Item) {
	t.Helper()
	d := serve.NewSessions(&Destination{})
	t.Cleanup(func() { d.Close() })
	x, err := d.Session(context.Background(), raw)
	if err != nil {
		t.Fatal(err)
	}
	s.CreateAbandoned(t, "analytics", table, func(ctx context.Context) error {
		_, _, err := x.(*session).apply(ctx, serve.NewRange(serve.ApplyRequest{Settings: raw, Pipeline: "orders", FirstSequence: 1, Sequence: 1, Items: items}, nil))
		return err
	})
}
