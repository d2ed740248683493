package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/client"
	"github.com/skippr-dev/skippr/plugin-sdk/conformance"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"

	"github.com/skippr-dev/skippr/plugins/duckdb/dest"
)

// The conformance kit's checks, then what only a separate process shows: the file lock while the plugin runs,
// its release (with a checkpoint) when the host ends the plugin, and the dump command.
func TestConformance(t *testing.T) {
	bin := conformance.Build(t, ".")
	dir := t.TempDir()
	settings := mustJSON(t, map[string]any{"path": filepath.Join(dir, "conformance.duckdb"), "schema": "conf"})
	conformance.Run(t, conformance.Config{Binary: bin, Settings: settings, BadSettings: mustJSON(t, map[string]any{"path": dir})})
	// Rows cannot be read while the plugin holds the file: dest's TestRenameTable checks what the tables hold.
	t.Run("renamed-stream", func(t *testing.T) {
		conformance.CheckRenamedStream(t, conformance.Config{Binary: bin, Settings: mustJSON(t, map[string]any{"path": filepath.Join(dir, "renamed.duckdb"), "history": true})})
	})
	t.Run("lock-and-dump", func(t *testing.T) { testLockAndDump(t, bin) })
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func testLockAndDump(t *testing.T, bin string) {
	path := filepath.Join(t.TempDir(), "locked.duckdb")
	settings := mustJSON(t, map[string]any{"path": path})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	sc := change.Schema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "tags", Type: arrow.ListOf(arrow.BinaryTypes.String), Nullable: true},
	}, []string{"id"})
	rec, _, err := array.RecordFromJSON(memory.DefaultAllocator, sc, strings.NewReader(
		`[{"id": 10, "tags": ["c"], "_skippr_op": 1}, {"id": 9, "tags": null, "_skippr_op": 1}, {"id": 2, "tags": [], "_skippr_op": 1}, {"id": 9, "tags": ["a", "b"], "_skippr_op": 2}]`))
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Release()
	ipc, err := protocol.EncodeRecord(memory.DefaultAllocator, rec)
	if err != nil {
		t.Fatal(err)
	}
	c := conformance.Start(t, bin, nil)
	if _, err := c.Apply(ctx, settings, "p", 1, []client.ApplyItem{{Batch: &protocol.Batch{Stream: "app.things", Rows: rec.NumRows(), IPC: ipc}}}); err != nil {
		t.Fatalf("apply: %v", err)
	}

	// The running plugin holds the file: another process waits, then says who to blame.
	short, cancelShort := context.WithTimeout(ctx, time.Second)
	_, err = dest.Open(short, path, false, dest.LockWait)
	cancelShort()
	if err == nil || !strings.Contains(err.Error(), "open in another process") {
		t.Fatalf("open while the plugin holds the file: %v", err)
	}
	dump := func() (string, error) {
		cmd := exec.CommandContext(ctx, bin, "dump", "app.things")
		cmd.Stdin = bytes.NewReader(settings)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		if err != nil {
			return errb.String(), err
		}
		return out.String(), nil
	}
	if out, err := dump(); err == nil || !strings.Contains(out, "open in another process") {
		t.Fatalf("dump while the plugin holds the file: %v %s", err, out)
	}

	// Ending the plugin the way the engine does closes the database: checkpointed, nothing left in the WAL.
	c.Kill()
	if fi, err := os.Stat(path + ".wal"); err == nil && fi.Size() > 0 {
		t.Fatalf("the plugin left %d bytes in %s.wal: it did not close the database", fi.Size(), path)
	}
	out, err := dump()
	if err != nil {
		t.Fatalf("dump: %v\n%s", err, out)
	}
	// Ordered by the key's value, not by the text of the rows.
	want := `{"id":2,"tags":[]}` + "\n" + `{"id":9,"tags":["a","b"]}` + "\n" + `{"id":10,"tags":["c"]}` + "\n"
	if out != want {
		t.Fatalf("dump:\ngot  %s\nwant %s", out, want)
	}
	if out, err := exec.CommandContext(ctx, bin, "dump", "a", "b").CombinedOutput(); err == nil || !strings.Contains(string(out), "want one stream") {
		t.Fatalf("dump with two names: %v %s", err, out)
	}
}
