package harness

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// CreateOrders creates the chaos tests' source table with n rows.
func CreateOrders(t *testing.T, ctx context.Context, c *pgx.Conn, n int) {
	t.Helper()
	for _, q := range []string{
		`CREATE TABLE orders (id bigint PRIMARY KEY, name text NOT NULL, amount numeric(12,2), tags text[], doc jsonb, at timestamptz)`,
		fmt.Sprintf(`INSERT INTO orders SELECT i, 'n' || i, i * 1.25, ARRAY['a', 'b' || (i %% 5)], jsonb_build_object('k', i), '2026-01-01'::timestamptz + i * interval '1 second' FROM generate_series(1, %d) i`, n),
	} {
		if _, err := c.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
}

// StartOrdersWriter keeps changing orders through w — inserts from id next on, updates and deletes of
// random earlier ids, in small transactions — until the returned stop is called (stop waits for it).
func StartOrdersWriter(t *testing.T, ctx context.Context, w *pgx.Conn, next int64) (stop func()) {
	writerCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(1, 2))
		for writerCtx.Err() == nil {
			id := 1 + rng.Int64N(next-1)
			var q string
			switch rng.IntN(3) {
			case 0:
				q = fmt.Sprintf(`INSERT INTO orders VALUES (%d, 'new', 1.5, ARRAY['x'], '{"new": true}', now())`, next)
				next++
			case 1:
				q = fmt.Sprintf(`UPDATE orders SET name = name || '+', amount = amount + 1, doc = doc || '{"u": 1}' WHERE id = %d`, id)
			default:
				q = fmt.Sprintf(`DELETE FROM orders WHERE id = %d`, id)
			}
			if _, err := w.Exec(writerCtx, q); err != nil && writerCtx.Err() == nil {
				t.Errorf("writer: %v", err)
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	return func() { cancel(); wg.Wait() }
}
