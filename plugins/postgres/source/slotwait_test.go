package source

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugins/postgres/config"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// TestCreateSlotWatchesBlockers drives createSlot on a real server while another session holds a transaction id
// (it inserted a row and stays idle in transaction). Each way the wait can end: the blocker commits (the slot is
// made; report named the blocker first), snapshot_wait_timeout passes (a config fault naming the blocker and the
// fix), the Read is cancelled (it returns at once). The last two leave neither the slot nor a walsender still
// waiting behind.
func TestCreateSlotWatchesBlockers(t *testing.T) {
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE TABLE held (v int)`)
	admin := db.Connect(t)
	for i, tc := range []struct {
		name    string
		timeout time.Duration
		cancel  time.Duration // cancel the Read after this long (0: never)
		commit  bool          // the blocker commits once reported
	}{
		{name: "blocker commits", timeout: time.Minute, commit: true},
		{name: "timeout", timeout: 3 * time.Second},
		{name: "cancelled", timeout: time.Minute, cancel: 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			raw, _ := json.Marshal(map[string]any{"host": db.Server.Host, "port": db.Server.Port, "user": "postgres", "database": db.Name, "sslmode": "disable"})
			cfg, err := config.Parse(raw)
			if err != nil {
				t.Fatal(err)
			}
			cfg.SnapshotWaitTimeout = tc.timeout
			pool, err := openPool(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			r := &reader{cfg: cfg, pool: pool, log: slog.New(slog.DiscardHandler)}

			holder, err := pgx.Connect(ctx, db.ConnString()+" application_name=held_open")
			if err != nil {
				t.Fatal(err)
			}
			defer holder.Close(context.Background())
			tx, err := holder.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(context.Background())
			var pid int32
			if err := tx.QueryRow(ctx, `INSERT INTO held VALUES (1) RETURNING pg_backend_pid()`).Scan(&pid); err != nil {
				t.Fatal(err)
			}

			repl, err := cfg.ConnectReplication(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer repl.Close(context.Background())
			walsender := repl.PID()
			slot := fmt.Sprintf("slotwait_%d", i)
			rctx, rcancel := context.WithCancel(ctx)
			defer rcancel()
			if tc.cancel > 0 {
				time.AfterFunc(tc.cancel, rcancel)
			}
			var reported []blocker
			start := time.Now()
			res, err := r.createSlot(rctx, repl, slot, pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: "NOEXPORT_SNAPSHOT"},
				"for the test", func(_ context.Context, waited time.Duration, bs []blocker) error {
					if reported == nil && tc.commit {
						if err := tx.Commit(ctx); err != nil {
							return err
						}
					}
					reported = bs
					return nil
				})
			took := time.Since(start)
			switch {
			case tc.commit:
				if err != nil || res.ConsistentPoint == "" {
					t.Fatalf("createSlot after the commit: %+v, %v", res, err)
				}
				if len(reported) != 1 || reported[0].PID != pid || reported[0].App != "held_open" || reported[0].State != "idle in transaction" || reported[0].XactStart == nil {
					t.Fatalf("reported %+v, want the blocker pid %d", reported, pid)
				}
				if took < blockerWarnAfter {
					t.Fatalf("reported after %v, before blockerWarnAfter", took)
				}
				if _, err := admin.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, slot); err != nil {
					t.Fatal(err)
				}
				return
			case tc.cancel > 0:
				if !errors.Is(err, context.Canceled) || took > tc.cancel+cancelWait {
					t.Fatalf("cancelled createSlot: %v after %v", err, took)
				}
			default:
				if !errors.Is(err, fault.ErrConfig) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", pid)) ||
					!strings.Contains(err.Error(), `application "held_open"`) || !strings.Contains(err.Error(), "snapshot_wait_timeout") ||
					!strings.Contains(fault.FixOf(err), fmt.Sprintf("SELECT pg_terminate_backend(%d)", pid)) {
					t.Fatalf("createSlot past its timeout: %v (fix %q)", err, fault.FixOf(err))
				}
				if took < tc.timeout || took > tc.timeout+cancelWait {
					t.Fatalf("gave up after %v, timeout %v", took, tc.timeout)
				}
			}
			// The server ended the creation: the walsender waits for nothing, and no slot was made.
			var slots, waiting int
			if err := admin.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1),
				(SELECT count(*) FROM pg_locks WHERE pid = $2 AND NOT granted)`, slot, int32(walsender)).Scan(&slots, &waiting); err != nil {
				t.Fatal(err)
			}
			if slots != 0 || waiting != 0 {
				t.Fatalf("after the wait ended: %d slots named %s, %d locks the walsender still waits for", slots, slot, waiting)
			}
		})
	}
}
