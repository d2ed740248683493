package bigquerytest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// CreateAbandoned runs create (a client's tables.insert of dataset.table) and cancels its context while the
// stand-in is creating the table, as a SIGKILLed client drops its connection; then it waits for the stand-in
// to finish the create anyway, as BigQuery finishes a request it received. The moment is made deterministic:
// an uncommitted CREATE TABLE of the same name in another PostgreSQL transaction holds the stand-in's on a lock
// until the client is cancelled, then rolls back.
func (s *Server) CreateAbandoned(t testing.TB, dataset, table string, create func(ctx context.Context) error) {
	t.Helper()
	ctx := context.Background()
	hold, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback(ctx)
	if _, err := hold.Exec(ctx, "CREATE TABLE "+pgIdent(dataset)+"."+pgIdent(table)+" (held int)"); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- create(cctx) }()
	s.await(t, "the stand-in's CREATE TABLE to wait on the held lock", func() (bool, error) {
		var n int
		err := s.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'
			AND query LIKE 'CREATE TABLE %' AND query LIKE '%'||$1||' (%'`, pgIdent(table)).Scan(&n)
		return n == 1, err
	})
	cancel()
	// Some clients wrap the cancellation in an error of their own, with its text.
	if err := <-done; !errors.Is(err, context.Canceled) && (err == nil || !strings.Contains(err.Error(), "context canceled")) {
		t.Fatalf("the abandoned create: %v; want it cancelled", err)
	}
	if err := hold.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	s.await(t, "the abandoned create to complete", func() (bool, error) {
		return slices.Contains(s.Tables(), dataset+"."+table), nil
	})
}

// await polls cond until it holds. The limit is generous: it only bounds a stand-in that never gets there, and
// a loaded machine must not fail a test that would pass.
func (s *Server) await(t testing.TB, what string, cond func() (bool, error)) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		ok, err := cond()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok {
			return
		}
	}
	t.Fatalf("timed out after a minute waiting for %s", what)
}
