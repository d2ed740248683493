package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/test/harness"
)

// TestCompactionBesideRunningSync compacts the lake table again and again while a sync keeps committing to
// it: each compaction commits (re-planned when it loses a race with an apply), and the table ends equal to
// the source row by row.
func TestCompactionBesideRunningSync(t *testing.T) {
	e := harness.NewEnv(t)
	gen := `{ seed: 22, rows: 40000, batch_size: 500, update_ratio: 0.3, delete_ratio: 0.1 }`
	// Paced, so the sync keeps writing small files while the compactions run.
	lakeSettings := e.DatagenToLake(harness.Paced(gen, 4000), "64KiB")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sync := e.Cmd(ctx, "sync")
	var syncErr bytes.Buffer
	sync.Stderr = &syncErr
	if err := sync.Start(); err != nil {
		t.Fatal(err)
	}
	// The table exists once the sync's first apply committed: however long the machine's load makes that, as
	// long as the sync's WAL moves (a fixed two seconds failed a loaded run with "table does not exist").
	compact := []string{"lake", "compact", "events", "--expire-older-than", "1ns", "--retain-last", "3"}
	var r harness.Result
	harness.WaitWhileProgressing(t, 2*time.Minute, harness.WALProgress(t, filepath.Join(e.Dir, "wal")), func() bool {
		r = e.Run(compact...)
		if r.Code != 0 && !strings.Contains(r.Stderr, "table does not exist") {
			t.Fatalf("lake compact: exit %d\n%s", r.Code, r.Stderr)
		}
		return r.Code == 0
	})
	compactions := 0
	for i := 0; i < 4; i++ {
		if i > 0 {
			time.Sleep(time.Second) // new small files from the sync between two compactions
			r = e.MustRun(compact...)
		}
		var res struct{ RemovedDataFiles, AddedDataFiles int }
		if err := json.Unmarshal([]byte(r.Stdout), &res); err != nil {
			t.Fatalf("lake compact output: %v\n%s", err, r.Stdout)
		}
		if res.RemovedDataFiles > 0 {
			compactions++
		}
	}
	if compactions == 0 {
		t.Fatalf("no compaction rewrote anything while the sync was writing small files")
	}
	sync.Process.Signal(syscall.SIGTERM)
	if err := sync.Wait(); err != nil {
		t.Fatalf("sync: %v\n%s", err, syncErr.String())
	}
	// The rest unpaced: datagen makes each event from its index, so the events after the stop are the same at
	// any pace.
	e.WriteDatagenLakeConfig(gen, lakeSettings, "64KiB")
	e.MustRun("sync", "--once")
	n := harness.LakeEqualsSource(t, lakeSettings, gen)
	t.Logf("%d compactions beside the sync; the lake's %d rows equal the source's", compactions, n)
}
