package e2e

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/skippr-dev/skippr/test/harness"
)

// The wal.compression setting reaches the WAL (segments carry its codec byte), and a log written under one
// setting is applied whole under another: every codec is read whatever the setting.
func TestWALCompressionSettingAndMixedLog(t *testing.T) {
	e := harness.NewEnv(t)
	gen := `{ seed: 7, rows: 3000, batch_size: 300, update_ratio: 0.2 }`
	walDir := filepath.Join(e.Dir, "wal")
	out := filepath.Join(e.Dir, "out")
	cfg := func(codec string) string {
		return harness.PipelineConfig(gen, out, "", "file://"+walDir, "      group_commit: { max_bytes: 1KiB }\n      compression: "+codec+"\n")
	}
	e.WriteConfig(cfg("zstd") + "    apply: { paused: true }\n")
	e.MustRun("sync", "--once")
	segs, err := filepath.Glob(filepath.Join(walDir, "segments", "*.seg"))
	if err != nil || len(segs) < 2 {
		t.Fatalf("segments after the first sync: %v, %v", segs, err)
	}
	for _, s := range segs {
		b, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) < 6 || b[5] != 1 {
			t.Fatalf("segment %s: codec byte %v, want 1 (zstd, as configured)", s, b[5:6])
		}
	}
	e.WriteConfig(cfg("none"))
	e.MustRun("sync", "--once")
	harness.Compare(t, out, harness.Want(t, gen))
	e.MustRun("wal", "inspect", "file://"+walDir)
}
