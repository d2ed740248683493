package dest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/jackc/pgx/v5"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/rowmeta"
	"github.com/skippr-dev/skippr/plugin-sdk/rowmeta/rowmetatest"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/testkit/bigquerytest"
)

// rowmetaTargets opens rowmetatest targets on one stand-in: each in a dataset of its own (the test stream's
// table is always items), with the case's settings or without.
func rowmetaTargets(t *testing.T, s *bigquerytest.Server, settings map[string]any) func(t *testing.T, name string) func(with bool) rowmetatest.Target {
	return func(t *testing.T, name string) func(with bool) rowmetatest.Target {
		dataset := strings.NewReplacer(" ", "_", "/", "_", "-", "_").Replace(t.Name() + "_" + name)
		d := serve.NewSessions(&Destination{})
		t.Cleanup(func() {
			if err := d.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
		})
		return func(with bool) rowmetatest.Target {
			m := map[string]any{"project": s.Project, "dataset": dataset, "endpoint": s.URL}
			if with {
				for k, v := range settings {
					m[k] = v
				}
			}
			raw, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			return rowmetatest.Target{
				Apply: func(ctx context.Context, first, last uint64, items []serve.Item) (serve.ApplyResult, error) {
					return d.Apply(ctx, serve.ApplyRequest{Settings: raw, Pipeline: "p", FirstSequence: first, Sequence: last, Items: items})
				},
				Read: func(ctx context.Context, table string) ([]string, []map[string]any, error) {
					return readStandIn(ctx, s, dataset, table)
				},
			}
		}
	}
}

// readStandIn reads a table of the stand-in's database as rowmetatest.Target.Read does.
func readStandIn(ctx context.Context, s *bigquerytest.Server, dataset, table string) ([]string, []map[string]any, error) {
	rs, err := s.Pool().Query(ctx, fmt.Sprintf("SELECT * FROM %s.%s", pgx.Identifier{dataset}.Sanitize(), pgx.Identifier{table}.Sanitize()))
	if err != nil {
		return nil, nil, err
	}
	defer rs.Close()
	var cols []string
	for _, f := range rs.FieldDescriptions() {
		cols = append(cols, f.Name)
	}
	var out []map[string]any
	for rs.Next() {
		vals, err := rs.Values()
		if err != nil {
			return nil, nil, err
		}
		r := map[string]any{}
		for i, c := range cols {
			r[c] = vals[i]
		}
		out = append(out, r)
	}
	return cols, out, rs.Err()
}

// TestRowMeta runs the SDK's soft delete and metadata columns check (plugin-sdk/rowmeta/rowmetatest) for each
// setting, each cut of the change sequence into ranges, and the replays, against the stand-in; then the
// clash, keyless and turned-on checks. The plugin has no re-snapshot (Capabilities.Resnapshot is false), so
// CheckResnapshot does not apply.
func TestRowMeta(t *testing.T) {
	s := bigquerytest.Start(t, project)
	for _, tc := range rowmetatest.Cases() {
		t.Run(tc.Name, func(t *testing.T) {
			open := rowmetaTargets(t, s, tc.Settings)
			target := func(t *testing.T, name string) rowmetatest.Target { return open(t, name)(true) }
			rowmetatest.Run(t, tc, target)
			t.Run("clash", func(t *testing.T) { rowmetatest.CheckClash(t, tc, target(t, "clash")) })
			t.Run("keyless", func(t *testing.T) { rowmetatest.CheckKeyless(t, tc, target(t, "keyless")) })
			t.Run("turned on", func(t *testing.T) {
				on := open(t, "turned_on")
				rowmetatest.CheckTurnedOn(t, tc, on(false), on(true))
			})
		})
	}
}

// TestHistory runs rowmetatest.CheckHistory: every change once in <table>_history, in order, whatever the
// cut into ranges; replays and ranges overlapping the fence append nothing; the mirror as Run checks it.
func TestHistory(t *testing.T) {
	s := bigquerytest.Start(t, project)
	for _, tc := range rowmetatest.HistoryCases() {
		t.Run(tc.Name, func(t *testing.T) {
			open := rowmetaTargets(t, s, tc.Settings)
			rowmetatest.CheckHistory(t, tc, func(t *testing.T, name string) rowmetatest.Target { return open(t, name)(true) })
		})
	}
}

// TestRowMetaPerTable: table_options override the connection's settings for one stream. The mirror checks
// (Run) see exactly the overridden columns, so a plugin deciding once per connection (here: soft_delete,
// synced_at and history on the connection) fails them; and the reverse, history and soft_delete only for the
// stream, is CheckHistory.
func TestRowMetaPerTable(t *testing.T) {
	s := bigquerytest.Start(t, project)
	off := rowmetatest.Case{
		Name: "connection_on_table_off",
		Settings: map[string]any{"soft_delete": true, "history": true, "metadata_columns": []any{"synced_at"},
			"table_options": map[string]any{rowmetatest.Stream: map[string]any{"soft_delete": false, "history": false, "metadata_columns": []any{"op", "position"}}}},
		Options: rowmeta.Options{Op: true, Position: true},
	}
	t.Run(off.Name, func(t *testing.T) {
		open := rowmetaTargets(t, s, off.Settings)
		var datasets []string
		rowmetatest.Run(t, off, func(t *testing.T, name string) rowmetatest.Target {
			datasets = append(datasets, strings.NewReplacer(" ", "_", "/", "_", "-", "_").Replace(t.Name()+"_"+name))
			return open(t, name)(true)
		})
		for _, ds := range datasets {
			if _, _, err := readStandIn(context.Background(), s, ds, rowmetatest.HistoryTable); err == nil {
				t.Errorf("dataset %s has %s, but table_options turned history off for %s", ds, rowmetatest.HistoryTable, rowmetatest.Stream)
			}
		}
	})
	on := rowmetatest.Case{
		Name:     "connection_off_table_on",
		Settings: map[string]any{"table_options": map[string]any{rowmetatest.Stream: map[string]any{"soft_delete": true, "history": true}}},
		Options:  rowmeta.Options{SoftDelete: true, History: true},
	}
	t.Run(on.Name, func(t *testing.T) {
		open := rowmetaTargets(t, s, on.Settings)
		rowmetatest.CheckHistory(t, on, func(t *testing.T, name string) rowmetatest.Target { return open(t, name)(true) })
	})
}

// TestRangeOf150TablesWithHistory: history doubles the tables a range mutates, and a transaction may mutate
// at most 100 ("Multi-statement transactions", Limitations). A range over 150 streams with history is 300
// tables: it must commit in transactions of at most 100, each stream's table and history table in the same
// transaction as its state row; and when one transaction is cancelled by a concurrent one (on a history
// table), the retry of the range must leave every change in every history exactly once (the stand-in
// enforces the history's key (position, seq), so a second copy fails the retry).
func TestRangeOf150TablesWithHistory(t *testing.T) {
	s := bigquerytest.Start(t, project)
	raw := json.RawMessage(fmt.Sprintf(`{"project": %q, "dataset": "analytics", "endpoint": %q, "history": true, "soft_delete": true}`, s.Project, s.URL))
	const tables = 150
	items := func() []serve.Item {
		var out []serve.Item
		for i := range tables {
			out = append(out, serve.Item{Stream: fmt.Sprintf("public.t%03d", i), Record: kvBatch(memory.DefaultAllocator, true,
				kv{op: change.OpInsert, id: int64(i), v: "x"}, kv{op: change.OpUpdate, id: int64(i), v: "y"}), Sequence: 1})
		}
		return out
	}
	req := serve.ApplyRequest{Settings: raw, Pipeline: "snap", FirstSequence: 1, Sequence: 1}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	release := s.Mutate("analytics", "t120_history")
	d := serve.NewSessions(&Destination{})
	t.Cleanup(func() { d.Close() })
	_, err := d.ApplyStream(ctx, req, seqOf(items()))
	release()
	if err == nil || !errors.Is(err, fault.ErrTransient) {
		t.Fatalf("a transaction of the range was cancelled: want a transient error, got %v", err)
	}
	if n := countRows(t, s, "t000_history"); n != 2 {
		t.Fatalf("t000_history has %d rows after the first transaction; want 2", n)
	}

	d2 := serve.NewSessions(&Destination{})
	t.Cleanup(func() { d2.Close() })
	if _, err := d2.ApplyStream(ctx, req, seqOf(items())); err != nil {
		t.Fatalf("retry of the range: %v", err)
	}
	for i := range tables {
		if n := countRows(t, s, fmt.Sprintf("t%03d", i)); n != 1 {
			t.Fatalf("table t%03d has %d rows, want 1", i, n)
		}
		if n := countRows(t, s, fmt.Sprintf("t%03d_history", i)); n != 2 {
			t.Fatalf("table t%03d_history has %d rows, want 2 (insert, update)", i, n)
		}
	}
	if res, err := d2.ApplyStream(ctx, req, seqOf(items())); err != nil || !res.Skipped {
		t.Fatalf("a replay of the committed range: %+v, %v; want skipped", res, err)
	}
	// Every transaction mutates at most 100 tables, and holds a stream's history with its table.
	mutated := regexp.MustCompile("(?m)^(?:MERGE|INSERT INTO) `[^`]+`\\.`analytics`\\.`(t[0-9]{3})(_history)?`")
	commits := 0
	for _, q := range s.Queries() {
		if !strings.HasPrefix(q, "BEGIN TRANSACTION") {
			continue
		}
		commits++
		seen := map[string]bool{}
		for _, m := range mutated.FindAllStringSubmatch(q, -1) {
			seen[m[1]+m[2]] = true
		}
		if len(seen)+1 > bigquerytest.MaxTransactionTables {
			t.Errorf("a transaction mutates %d tables and the state table", len(seen))
		}
		for name := range seen {
			if strings.HasSuffix(name, "_history") {
				continue
			}
			if !seen[name+"_history"] {
				t.Errorf("a transaction writes %s without %s_history", name, name)
			}
		}
	}
	if n := s.WriteStreamsCreated(); n != 0 {
		t.Errorf("%d CreateWriteStream calls; the history's staging must use the default stream too (quota: 10,000 an hour)", n)
	}
	if commits < 4 {
		t.Errorf("%d transactions; 300 tables need at least 4 of at most 99 (the first attempt's 2 included)", commits)
	}
}

// TestHistoryFollowsRenames: a column the source renamed is renamed in the history table too, and changes
// staged under the former name before the rename (earlier entries of the range, or earlier in the entry)
// land in the renamed column.
func TestHistoryFollowsRenames(t *testing.T) {
	const st = "public.items"
	schemaOf := func(b arrow.RecordBatch, seq uint64) serve.Item {
		return serve.Item{Stream: st, Schema: &serve.Stream{Name: st, Schema: b.Schema()}, Sequence: seq}
	}
	rec := func(b arrow.RecordBatch, seq uint64) serve.Item {
		return serve.Item{Stream: st, Record: b, Sequence: seq}
	}
	for _, tc := range []struct {
		name   string
		ranges [][]serve.Item
	}{
		{"across applies", [][]serve.Item{
			{schemaOf(renameBatch(false, 1), 1), rec(renameBatch(false, 1), 1)},
			{schemaOf(renameBatch(true, 2), 2), rec(renameBatch(true, 2), 2)},
		}},
		{"across entries of one apply", [][]serve.Item{{
			schemaOf(renameBatch(false, 1), 1), rec(renameBatch(false, 1), 1),
			schemaOf(renameBatch(true, 2), 2), rec(renameBatch(true, 2), 2),
		}}},
		{"within one entry", [][]serve.Item{{
			schemaOf(renameBatch(false, 1), 1), rec(renameBatch(false, 1), 1),
			schemaOf(renameBatch(true, 2), 1), rec(renameBatch(true, 2), 1),
		}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := bigquerytest.Start(t, project)
			raw := json.RawMessage(fmt.Sprintf(`{"project": %q, "dataset": "analytics", "endpoint": %q, "history": true}`, s.Project, s.URL))
			d := serve.NewSessions(&Destination{})
			t.Cleanup(func() { d.Close() })
			for _, r := range tc.ranges {
				apply(t, d, raw, r[0].Sequence, r[len(r)-1].Sequence, r...)
			}
			cols, rows, err := readStandIn(context.Background(), s, "analytics", "items_history")
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(cols, ",") != "id,amount,_skippr_op,_skippr_source_committed_at,_skippr_position,_skippr_seq" {
				t.Fatalf("items_history has columns %v", cols)
			}
			var got []string
			for _, r := range rows {
				got = append(got, fmt.Sprintf("%v=%v", r["id"], r["amount"]))
			}
			slices.Sort(got)
			if want := []string{"1=10", "2=20"}; !slices.Equal(got, want) {
				t.Fatalf("items_history holds %v, want %v", got, want)
			}
		})
	}
}

// TestSyncedAtIsTheTransactions: _skippr_synced_at is one time for every row of a transaction, in every table
// it writes (rowmeta: "every row of one apply alike"), not each statement's start, which CURRENT_TIMESTAMP()
// alone gives in BigQuery (and statement_timestamp() in the stand-in).
func TestSyncedAtIsTheTransactions(t *testing.T) {
	s := bigquerytest.Start(t, project)
	raw := json.RawMessage(fmt.Sprintf(`{"project": %q, "dataset": "analytics", "endpoint": %q, "metadata_columns": ["synced_at"], "soft_delete": true}`, s.Project, s.URL))
	d := serve.NewSessions(&Destination{})
	t.Cleanup(func() { d.Close() })
	var items []serve.Item
	for _, st := range []string{"public.a", "public.b", "public.c"} {
		items = append(items, serve.Item{Stream: st, Sequence: 1, Record: kvBatch(memory.DefaultAllocator, true,
			kv{op: change.OpInsert, id: 1, v: "x"}, kv{op: change.OpInsert, id: 2, v: "y"})})
		items = append(items, serve.Item{Stream: st, Sequence: 2, Record: kvBatch(memory.DefaultAllocator, true,
			kv{op: change.OpDelete, id: 1})})
	}
	apply(t, d, raw, 1, 2, items...)
	var n int
	if err := s.Pool().QueryRow(context.Background(), `SELECT count(DISTINCT _skippr_synced_at) FROM (
		SELECT _skippr_synced_at FROM analytics.a UNION ALL SELECT _skippr_synced_at FROM analytics.b
		UNION ALL SELECT _skippr_synced_at FROM analytics.c) AS x`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("the rows of one transaction hold %d different _skippr_synced_at; want 1", n)
	}
}
