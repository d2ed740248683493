package fleet

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skippr-dev/skippr/test/harness"
	"github.com/skippr-dev/skippr/testkit/netns"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// TestSyncAcrossHosts runs `skippr sync` on host w1 against Postgres on host db (two network namespaces on a
// private bridge, testkit/netns) while a writer changes the source; it SIGKILLs the engine inside its host at
// random times and cuts w1's link in the middle of one run, then catches up and compares source and destination
// row by row. It is the pattern the fleet tests build on.
func TestSyncAcrossHosts(t *testing.T) {
	n := netns.New(t, "skhost")
	db, w1 := n.Host(t, "db"), n.Host(t, "w1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	pg, err := pgtest.Start(ctx, pgtest.Options{Netns: db})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := pg.Stop(); err != nil {
			t.Error(err)
		}
	})
	src, dst := pg.NewDB(t), pg.NewDB(t)
	// The test binary reaches db's server through its Unix socket; w1 through the segment.
	conn := func(d *pgtest.DB) *pgx.Conn {
		c, err := pgx.Connect(ctx, pg.LocalConnString(d.Name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(context.Background()) })
		return c
	}
	sc := conn(src)
	harness.CreateOrders(t, ctx, sc, 20000)

	e := harness.NewEnv(t)
	e.WriteConfig(fmt.Sprintf(`connections:
  src:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: %[1]s, port: %[2]d, user: postgres, database: %[3]s, sslmode: disable, tables: [public.orders], slot: hosts, publication: hosts, batch_size: 2000 }
  dst:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: %[1]s, port: %[2]d, user: postgres, database: %[4]s, sslmode: disable }
pipelines:
  orders:
    source: src
    destinations: [dst]
    wal:
      url: file://%[5]s
      group_commit: { max_bytes: 256KiB, max_delay: 50ms }
`, pg.Host, pg.Port, src.Name, dst.Name, filepath.Join(e.Dir, "wal")))
	// inW1 makes a skippr command run inside w1; it dies with the test binary.
	inW1 := func(cmd *exec.Cmd) *exec.Cmd {
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := w1.Wrap(cmd); err != nil {
			t.Fatal(err)
		}
		return cmd
	}

	stopWriter := harness.StartOrdersWriter(t, ctx, conn(src), 20001)
	seed := time.Now().UnixNano()
	t.Logf("kill seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 19))
	const kills = 5
	for i := range kills {
		runCtx, runCancel := context.WithCancel(ctx)
		cmd := inW1(e.Cmd(runCtx, "sync", "--wait-lock"))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500*time.Millisecond + time.Duration(rng.Int64N(int64(2*time.Second))))
		if i == kills/2 {
			// A cable cut at the switch while the engine reads and applies: its connections stall, then resume.
			if err := w1.LinkDown(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(2 * time.Second)
			if err := w1.LinkUp(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second)
		}
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
		runCancel()
		if cmd.ProcessState.Exited() {
			t.Fatalf("run %d: sync exited by itself (%d) before it was killed:\n%s", i, cmd.ProcessState.ExitCode(), stderr.String())
		}
	}
	stopWriter()

	var out, errb bytes.Buffer
	cmd := inW1(e.Cmd(ctx, "sync", "--once"))
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("catch-up sync --once in w1: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errb.String())
	}

	dump := func(c *pgx.Conn) []string {
		rows, err := c.Query(ctx, `SELECT id::text || '|' || name || '|' || coalesce(amount::text, '') || '|' || coalesce(tags::text, '') || '|' || coalesce(doc::text, '') || '|' || coalesce(at::text, '') FROM orders ORDER BY id`)
		if err != nil {
			t.Fatal(err)
		}
		rs, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return rs
	}
	want, got := dump(sc), dump(conn(dst))
	if len(want) != len(got) {
		t.Fatalf("source has %d rows, destination %d", len(want), len(got))
	}
	for i := range want {
		if want[i] != got[i] {
			t.Fatalf("row %d differs:\nsource      %s\ndestination %s", i, want[i], got[i])
		}
	}
	t.Logf("%d SIGKILLs of sync in host w1 (one across a link cut); %d rows equal in source (host db) and destination", kills, len(want))
}
