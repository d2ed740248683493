package source

import (
	"context"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// TestWaitVisible: waitVisible returns at once for a committed transaction and waits for one still in
// progress until it commits (the walsender can send a transaction before it is visible; see waitVisible).
func TestWaitVisible(t *testing.T) {
	db := pgtest.NewDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, holder := db.Connect(t), db.Connect(t)
	xidOf := func(q string) uint32 {
		var x int64
		if err := holder.QueryRow(ctx, q).Scan(&x); err != nil {
			t.Fatal(err)
		}
		return uint32(x) // the low 32 bits, as pgoutput's Begin carries them
	}
	done := xidOf(`SELECT pg_current_xact_id()::text::bigint`)
	start := time.Now()
	if err := waitVisible(ctx, conn, done); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > visibleWait/2 {
		t.Fatalf("committed transaction %d: waited %v", done, d)
	}

	if _, err := holder.Exec(ctx, `BEGIN`); err != nil {
		t.Fatal(err)
	}
	open := xidOf(`SELECT pg_current_xact_id()::text::bigint`)
	returned, waiter := make(chan error, 1), db.Connect(t)
	go func() { returned <- waitVisible(ctx, waiter, open) }()
	select {
	case err := <-returned:
		t.Fatalf("returned while transaction %d is open: %v", open, err)
	case <-time.After(300 * time.Millisecond):
	}
	if _, err := holder.Exec(ctx, `COMMIT`); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-returned:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(visibleWait / 2):
		t.Fatalf("still waiting after transaction %d committed", open)
	}
}
