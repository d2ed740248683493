package dest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/bigquery"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/api/googleapi"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/testkit/bigquerytest"
)

// These tests run against testkit/bigquerytest, a STAND-IN for BigQuery (the cloud service cannot run here).
// Each stand-in behaviour they rely on is written from BigQuery's documentation, quoted where the stand-in
// implements it and below.

// countRows counts the rows of a stand-in table.
func countRows(t *testing.T, s *bigquerytest.Server, table string) int {
	t.Helper()
	var n int
	if err := s.Pool().QueryRow(context.Background(), fmt.Sprintf(`SELECT count(*) FROM analytics.%q`, table)).Scan(&n); err != nil {
		t.Fatalf("count %s: %v", table, err)
	}
	return n
}

// TestRangeOf500TablesCommitsOnce: "A transaction can mutate data in at most 100 tables and can perform at
// most 100,000 partition modifications." (BigQuery, "Multi-statement transactions", Limitations.) A range
// touching 500 tables — an initial snapshot of a 500-table database coalesced into one apply — used to fail on
// every retry. It must commit, and when it stops between its transactions (here: one is cancelled by a
// concurrent transaction on one of its tables, "Conflicting transactions are cancelled"), the engine's retry
// of the same range must land every row exactly once: the streams are keyless, so a second copy would show.
func TestRangeOf500TablesCommitsOnce(t *testing.T) {
	s := bigquerytest.Start(t, project)
	raw := settings(s)
	const tables = 500
	var items []serve.Item
	for i := range tables {
		items = append(items, serve.Item{Stream: fmt.Sprintf("public.t%03d", i), Record: kvBatch(memory.DefaultAllocator, false, kv{op: change.OpInsert, id: int64(i), v: "x"}), Sequence: 1})
	}
	req := serve.ApplyRequest{Settings: raw, Pipeline: "snap", FirstSequence: 1, Sequence: 1}
	// Bounded: before the fix the plugin held a pending stream open per table until the range committed, and
	// 500 of them stalled here rather than failing.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// Another transaction mutates t250 while the range applies: the transaction holding t250 is cancelled,
	// after the ones before it committed.
	release := s.Mutate("analytics", "t250")
	d := serve.NewSessions(&Destination{})
	t.Cleanup(func() { d.Close() })
	_, err := d.ApplyStream(ctx, req, seqOf(items))
	release()
	if err == nil {
		t.Fatal("the apply committed although a transaction of its range was cancelled")
	}
	if !errors.Is(err, fault.ErrTransient) {
		t.Fatalf("a cancelled transaction must be retried (transient); got %v", err)
	}
	if n := countRows(t, s, "t000"); n != 1 {
		t.Fatalf("t000 has %d rows after the first transactions; want 1 (they commit before the cancelled one)", n)
	}

	// The engine retries the range from a fresh process: every table ends with its one row.
	d2 := serve.NewSessions(&Destination{})
	t.Cleanup(func() { d2.Close() })
	if _, err := d2.ApplyStream(ctx, req, seqOf(items)); err != nil {
		t.Fatalf("retry of the range: %v", err)
	}
	for i := range tables {
		if n := countRows(t, s, fmt.Sprintf("t%03d", i)); n != 1 {
			t.Fatalf("table t%03d has %d rows, want exactly 1", i, n)
		}
	}
	if res, err := d2.ApplyStream(context.Background(), req, seqOf(items)); err != nil || !res.Skipped {
		t.Fatalf("a replay of the committed range: %+v, %v; want skipped", res, err)
	}
	if a, err := d2.LastApplied(context.Background(), raw, "snap"); err != nil || a.Sequence != 1 {
		t.Fatalf("last applied %+v, %v; want 1", a, err)
	}
	for _, q := range s.Queries() {
		if n := strings.Count(q, "\nMERGE ") + strings.Count(q, "\nINSERT INTO "); n > 100 {
			t.Fatalf("a transaction mutates %d tables", n)
		}
	}
}

// oneColumn is a batch of one row (id, <col>) keyed by id.
func oneColumn(col string, id int64) arrow.RecordBatch {
	b := change.NewBuilder(memory.DefaultAllocator, change.Schema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: col, Type: arrow.BinaryTypes.String, Nullable: true}}, []string{"id"}))
	defer b.Release()
	b.Field(0).(*array.Int64Builder).Append(id)
	b.Field(1).(*array.StringBuilder).Append("v")
	b.Row(change.OpInsert, "")
	return b.NewBatch()
}

// TestColumnNamesBigQueryRefuses: "Flexible column names don't support the following special characters: An
// exclamation mark (!) … A period (.) … A slash (/) …" and "Column names cannot use any of the following
// prefixes: … _CHANGE_SEQUENCE_NUMBER, _CHANGE_TYPE, _CHANGE_TIMESTAMP" (BigQuery, "Specify a schema"). The
// stand-in answers tables.insert with 400 as BigQuery does; the plugin used to retry that forever. A name
// BigQuery refuses must stop the pipeline with a data fault naming table and column and the fix; names that
// flexible column names allow (spaces, dashes, non-ASCII letters) must work.
func TestColumnNamesBigQueryRefuses(t *testing.T) {
	s := bigquerytest.Start(t, project)
	raw := settings(s)
	d := serve.NewSessions(&Destination{})
	t.Cleanup(func() { d.Close() })
	for i, tc := range []struct {
		col    string
		refuse bool
	}{
		{"a.b", true}, {"price($)", true}, {"_CHANGE_TYPE", true}, {"_change_sequence_number_x", true}, {"q?", true},
		{"order date", false}, {"naïve-col", false}, {"größe", false},
	} {
		seq := uint64(i + 1)
		table := fmt.Sprintf("names%d", i)
		_, _, err := applyStats(d, serve.ApplyRequest{Settings: raw, Pipeline: "names", FirstSequence: seq, Sequence: seq,
			Items: []serve.Item{{Stream: "public." + table, Record: oneColumn(tc.col, 1), Sequence: seq}}})
		if !tc.refuse {
			if err != nil {
				t.Fatalf("column %q: %v", tc.col, err)
			}
			continue
		}
		if !errors.Is(err, fault.ErrData) || !strings.Contains(err.Error(), table) || !strings.Contains(err.Error(), tc.col) || !strings.Contains(fault.FixOf(err), "rename column") {
			t.Fatalf("column %q: want a data fault naming table %s and the column, with a rename fix; got %v (fix %q)", tc.col, table, err, fault.FixOf(err))
		}
		// The pipeline stops there; the next test case is another pipeline run, as after the user's fix.
		d.Close()
		d = serve.NewSessions(&Destination{})
		if err := func() error {
			a, err := d.LastApplied(context.Background(), raw, "names")
			if err == nil && a.Sequence != seq-1 {
				return fmt.Errorf("sequence %d", a.Sequence)
			}
			return err
		}(); err != nil {
			t.Fatalf("after the refused column %q: %v", tc.col, err)
		}
		// Skip the refused entry, as a user who renamed the column re-snapshots the table.
		apply := serve.ApplyRequest{Settings: raw, Pipeline: "names", FirstSequence: seq, Sequence: seq,
			Items: []serve.Item{{Stream: "public." + table, Record: oneColumn("renamed", 1), Sequence: seq}}}
		if _, _, err := applyStats(d, apply); err != nil {
			t.Fatalf("after renaming %q: %v", tc.col, err)
		}
	}
	t.Cleanup(func() { d.Close() })
}

// TestTableNamesDifferingInCase: BigQuery table names are case-sensitive by default ("Datasets … are case-
// sensitive by default", the is_case_insensitive dataset option makes them not), so streams Orders and orders
// go to two tables, in one apply too. The plugin used to refuse them.
func TestTableNamesDifferingInCase(t *testing.T) {
	s := bigquerytest.Start(t, project)
	raw := settings(s)
	d := serve.NewSessions(&Destination{})
	t.Cleanup(func() { d.Close() })
	apply(t, d, raw, 1, 1,
		serve.Item{Stream: "public.Orders", Record: kvBatch(memory.DefaultAllocator, true, kv{op: change.OpInsert, id: 1, v: "upper"}), Sequence: 1},
		serve.Item{Stream: "public.orders", Record: kvBatch(memory.DefaultAllocator, true, kv{op: change.OpInsert, id: 2, v: "lower"}, kv{op: change.OpInsert, id: 3, v: "lower"}), Sequence: 1})
	if a, b := countRows(t, s, "Orders"), countRows(t, s, "orders"); a != 1 || b != 2 {
		t.Fatalf("Orders has %d rows, orders %d; want 1 and 2", a, b)
	}
}

// TestPipelinesSharingADataset: "If a transaction mutates (update or deletes) rows in a table, then other
// transactions or DML statements that mutate rows in the same table cannot run concurrently. Conflicting
// transactions are cancelled." (BigQuery, "Multi-statement transactions", Transaction concurrency.) Pipelines
// that share a dataset must not all update one state table in every transaction: while another pipeline's
// transaction holds the shared _skippr_state, both pipelines here must progress, also side by side. A
// conflict on a table the user made two pipelines share is retried (transient), not a failure.
func TestPipelinesSharingADataset(t *testing.T) {
	s := bigquerytest.Start(t, project)
	raw := settings(s)
	d := serve.NewSessions(&Destination{})
	t.Cleanup(func() { d.Close() })
	// The dataset and legacy table exist, and another pipeline's transaction is mutating the shared table.
	if err := d.Check(context.Background(), raw); err != nil {
		t.Fatal(err)
	}
	release := s.Mutate("analytics", "_skippr_state")
	defer release()
	const applies = 8
	var wg sync.WaitGroup
	errs := make(chan error, 2*applies)
	for _, p := range []string{"alpha", "beta"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := uint64(1); seq <= applies; seq++ {
				_, _, err := applyStats(d, serve.ApplyRequest{Settings: raw, Pipeline: p, FirstSequence: seq, Sequence: seq,
					Items: []serve.Item{{Stream: "public." + p, Record: kvBatch(memory.DefaultAllocator, true, kv{op: change.OpInsert, id: int64(seq), v: p}), Sequence: seq}}})
				if err != nil {
					errs <- fmt.Errorf("pipeline %s apply %d: %w", p, seq, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, p := range []string{"alpha", "beta"} {
		if n := countRows(t, s, p); n != applies {
			t.Fatalf("table %s has %d rows, want %d", p, n, applies)
		}
		if a, err := d.LastApplied(context.Background(), raw, p); err != nil || a.Sequence != applies {
			t.Fatalf("pipeline %s last applied %+v, %v", p, a, err)
		}
	}
	// A target table another transaction mutates: the apply is cancelled and retried, then lands.
	busy := s.Mutate("analytics", "alpha")
	req := serve.ApplyRequest{Settings: raw, Pipeline: "alpha", FirstSequence: applies + 1, Sequence: applies + 1,
		Items: []serve.Item{{Stream: "public.alpha", Record: kvBatch(memory.DefaultAllocator, true, kv{op: change.OpInsert, id: 100, v: "late"}), Sequence: applies + 1}}}
	if _, _, err := applyStats(d, req); !errors.Is(err, fault.ErrTransient) || !strings.Contains(err.Error(), "concurrent update") {
		t.Fatalf("a cancelled transaction must be a transient fault; got %v", err)
	}
	busy()
	if _, _, err := applyStats(d, req); err != nil {
		t.Fatalf("retry after the conflict: %v", err)
	}
	if n := countRows(t, s, "alpha"); n != applies+1 {
		t.Fatalf("alpha has %d rows, want %d", n, applies+1)
	}
}

// TestWriteStreamQuota: "CreateWriteStream requests: 10,000 streams every hour, per project per region … Consider
// using the default stream if you don't need exactly-once semantics." (BigQuery, "Quotas and limits".) A pending
// stream per table per apply exhausts it with about 166 tables changing every minute at the default interval.
// The stand-in counts per hour and refuses past the quota, lowered here to 5: twenty table-applies must still
// land.
func TestWriteStreamQuota(t *testing.T) {
	s := bigquerytest.Start(t, project)
	s.SetWriteStreamQuota(5)
	raw := settings(s)
	d := serve.NewSessions(&Destination{})
	t.Cleanup(func() { d.Close() })
	// A refused CreateWriteStream is retried inside the client (RESOURCE_EXHAUSTED), so without the fix an
	// apply would hang: bound each one.
	x, err := d.Session(context.Background(), raw)
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); seq <= 10; seq++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		_, _, err := x.(*session).apply(ctx, serve.NewRange(serve.ApplyRequest{Settings: raw, Pipeline: "quota", FirstSequence: seq, Sequence: seq, Items: []serve.Item{
			{Stream: "public.a", Record: kvBatch(memory.DefaultAllocator, true, kv{op: change.OpInsert, id: int64(seq), v: "a"}), Sequence: seq},
			{Stream: "public.b", Record: kvBatch(memory.DefaultAllocator, false, kv{op: change.OpInsert, id: int64(seq), v: "b"}), Sequence: seq}}}, nil))
		cancel()
		if err != nil {
			t.Fatalf("apply %d (CreateWriteStream calls this hour: %d): %v", seq, s.WriteStreamsCreated(), err)
		}
	}
	if a, b := countRows(t, s, "a"), countRows(t, s, "b"); a != 10 || b != 10 {
		t.Fatalf("a has %d rows, b %d; want 10 each", a, b)
	}
	if n := s.WriteStreamsCreated(); n != 0 {
		t.Fatalf("%d CreateWriteStream calls; the default stream needs none", n)
	}
}

// TestClassify: every 4xx BigQuery documents as permanent is a config fault with a fix, never a retry; rate
// limits, server errors, a transaction cancelled by a concurrent one and a moved fence are retried.
func TestClassify(t *testing.T) {
	s := Settings{Project: "my-project", Dataset: "analytics"}
	for _, tc := range []struct {
		name string
		err  error
		want error // a fault sentinel, or nil: left unclassified (retried)
	}{
		{"400 invalid from tables.insert", &googleapi.Error{Code: http.StatusBadRequest, Message: "Invalid field name", Errors: []googleapi.ErrorItem{{Reason: "invalid"}}}, fault.ErrConfig},
		{"400 invalidQuery", &googleapi.Error{Code: http.StatusBadRequest, Message: "Syntax error", Errors: []googleapi.ErrorItem{{Reason: "invalidQuery"}}}, fault.ErrConfig},
		{"job error invalidQuery", fmt.Errorf("job j1: %w", &bigquery.Error{Reason: "invalidQuery", Message: "Column x of type STRING cannot be assigned"}), fault.ErrConfig},
		{"403 accessDenied", &googleapi.Error{Code: http.StatusForbidden, Errors: []googleapi.ErrorItem{{Reason: "accessDenied"}}}, fault.ErrConfig},
		{"403 rateLimitExceeded", &googleapi.Error{Code: http.StatusForbidden, Errors: []googleapi.ErrorItem{{Reason: "rateLimitExceeded"}}}, fault.ErrTransient},
		{"concurrent transaction", fmt.Errorf("job j2: %w", &bigquery.Error{Reason: "invalidQuery", Message: "Transaction is aborted due to concurrent update against table p:d.t"}), fault.ErrTransient},
		{"fence moved", fmt.Errorf("job j3: %w", &bigquery.Error{Reason: "invalidQuery", Message: "skippr: the state rows of this pipeline changed since they were read (another writer?)"}), fault.ErrTransient},
		{"500 backendError", &googleapi.Error{Code: http.StatusInternalServerError, Errors: []googleapi.ErrorItem{{Reason: "backendError"}}}, nil},
		{"404 just created", &googleapi.Error{Code: http.StatusNotFound, Errors: []googleapi.ErrorItem{{Reason: "notFound"}}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := classify(tc.err, s)
			for _, c := range []error{fault.ErrConfig, fault.ErrData, fault.ErrTransient} {
				if errors.Is(got, c) != (c == tc.want) {
					t.Fatalf("classify(%v) = %v; want class %v", tc.err, got, tc.want)
				}
			}
			if tc.want == fault.ErrConfig && !strings.Contains(fault.FixOf(got), "analytics") {
				t.Fatalf("fix %q does not name the dataset", fault.FixOf(got))
			}
		})
	}
}
