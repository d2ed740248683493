package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/engine/pipeline"
	"github.com/skippr-dev/skippr/internal/testplugins"
	"github.com/skippr-dev/skippr/plugin-sdk/conformance/filedest"
	"github.com/skippr-dev/skippr/test/harness"
)

func TestSyncInstallsOnFirstUseAndIsExactlyOnce(t *testing.T) {
	e := harness.NewEnv(t)
	gen := `{ seed: 5, rows: 30000, batch_size: 1000, nested: true, update_ratio: 0.2, delete_ratio: 0.05 }`
	out := filepath.Join(e.Dir, "out")
	e.WriteConfig(harness.PipelineConfig(gen, out, "", "file://"+filepath.Join(e.Dir, "wal"), ""))
	r := e.MustRun("sync", "--once", "--log-format", "json")
	if !strings.Contains(r.Stderr, "installed plugin") {
		t.Errorf("first sync did not install the plugins:\n%s", r.Stderr)
	}
	w := harness.Want(t, gen)
	harness.Compare(t, out, w)
	// The summary on stdout, one JSON object: rows per stream, every stream the destination holds.
	var sum pipeline.Summary
	if err := json.Unmarshal([]byte(r.Stdout), &sum); err != nil {
		t.Fatalf("sync --once summary: %v\n%s", err, r.Stdout)
	}
	var streamRows int64
	if len(sum.Pipelines) == 1 {
		for _, s := range sum.Pipelines[0].Streams {
			if int64(len(w[s.Stream])) > s.Rows {
				t.Errorf("summary: stream %s committed %d rows, the destination holds %d", s.Stream, s.Rows, len(w[s.Stream]))
			}
			streamRows += s.Rows
		}
	}
	if len(sum.Pipelines) != 1 || len(sum.Pipelines[0].Streams) != len(w) || streamRows != sum.Rows || sum.Rows == 0 || sum.RowsPerSec <= 0 {
		t.Errorf("summary %+v; want one pipeline with the %d streams of the destination", sum, len(w))
	}

	// The lock pins both plugins with a checksum per platform.
	var lock struct {
		Plugins map[string]struct {
			Version string            `json:"version"`
			SHA256  map[string]string `json:"sha256"`
		} `json:"plugins"`
	}
	b, err := os.ReadFile(filepath.Join(e.Dir, "skippr.lock"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &lock); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"datagen", "testdest"} { // the plugins this pipeline uses
		if p := lock.Plugins[name]; p.Version != "0.1.0" || len(p.SHA256["linux_amd64"]) != 64 {
			t.Errorf("lock entry for %s: %+v", name, p)
		}
	}

	// Offline, with everything installed: runs, and duplicates nothing.
	r = e.MustRun("sync", "--once", "--offline")
	harness.Compare(t, out, w)
	if !regexp.MustCompile(`orders +\(all\) +0\n0 rows in .* \(0 rows/s\)`).MatchString(r.Stdout) {
		t.Errorf("sync --once printed no text summary:\n%s", r.Stdout)
	}

	var st []struct {
		Pipeline string `json:"pipeline"`
		WAL      struct {
			LastCommitted    uint64 `json:"last_committed"`
			ReclaimedThrough uint64 `json:"reclaimed_through"`
			Entries          int    `json:"entries"`
		} `json:"wal"`
	}
	r = e.MustRun("status", "--json")
	if err := json.Unmarshal([]byte(r.Stdout), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, r.Stdout)
	}
	if len(st) != 1 || st[0].WAL.LastCommitted == 0 || st[0].WAL.ReclaimedThrough != st[0].WAL.LastCommitted || st[0].WAL.Entries != 0 {
		t.Fatalf("status: %+v", st)
	}

	// A tampered installed binary refuses to start, also once a start has stamped it as verified
	// (registry/verified.go): a start after the binary's last change is 2 s old writes the stamp, and the
	// tamper keeps the size and puts the mtime back, so only the inode's ctime tells.
	bin := filepath.Join(e.Home, "plugins", "testdest", "0.1.0", "skippr-plugin-testdest")
	fi, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	changed := time.Unix(0, fi.Sys().(*syscall.Stat_t).Ctim.Nano())
	harness.WaitFor(t, time.Minute, func() bool { return time.Since(changed) > 3*time.Second })
	e.MustRun("sync", "--once", "--offline")
	if _, err := os.Stat(filepath.Join(filepath.Dir(bin), ".verified")); err != nil {
		t.Fatalf("a start 3 s after install wrote no verified stamp: %v", err)
	}
	f, err := os.OpenFile(bin, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("tampered"), fi.Size()/2); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.Chtimes(bin, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	r = e.Run("sync", "--once", "--offline")
	if r.Code != 4 || !strings.Contains(r.Stderr, "testdest") {
		t.Fatalf("sync with a tampered plugin: exit %d, want 4 naming the plugin\n%s", r.Code, r.Stderr)
	}
}

func TestSyncRefusals(t *testing.T) {
	e := harness.NewEnv(t)
	out := filepath.Join(e.Dir, "out")
	walURL := "file://" + filepath.Join(e.Dir, "wal")
	for _, tc := range []struct {
		name     string
		config   string
		args     []string
		code     int
		contains []string
	}{
		{
			name:     "exactly-once into a destination without it",
			config:   harness.PipelineConfig(`{ rows: 10 }`, out, ", at_least_once: true", walURL, ""),
			code:     2,
			contains: []string{"asks for exactly-once", "destination out cannot honour it"},
		},
		{
			name:     "config error names file, line and key",
			config:   harness.PipelineConfig(`{ rows: 10 }`, out, "", walURL, "    delivery: exactly-twice\n"),
			code:     2,
			contains: []string{"skippr.yml:", "delivery"},
		},
		{
			name:     "settings violate the plugin's schema",
			config:   harness.PipelineConfig(`{ rows: -5 }`, out, "", walURL, ""),
			code:     2,
			contains: []string{"skippr.yml:", "connections.gen.settings.rows"},
		},
		{
			// The local registry answers without it: no suggestion-less DNS failure of the public one.
			name:     "misspelt plugin name",
			config:   strings.Replace(harness.PipelineConfig(`{ rows: 10 }`, out, "", walURL, ""), "plugin: testdest", "plugin: testdst", 1),
			code:     3,
			contains: []string{"no plugin testdst in file://" + e.Registry + "; did you mean testdest?"},
		},
		{
			name:     "unknown pipeline",
			config:   harness.PipelineConfig(`{ rows: 10 }`, out, "", walURL, ""),
			args:     []string{"nope"},
			code:     2,
			contains: []string{`no pipeline "nope"`, "orders"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.WriteConfig(tc.config)
			r := e.Run(append([]string{"sync", "--once"}, tc.args...)...)
			if r.Code != tc.code {
				t.Fatalf("exit %d, want %d\n%s", r.Code, tc.code, r.Stderr)
			}
			for _, s := range tc.contains {
				if !strings.Contains(r.Stderr, s) {
					t.Errorf("stderr lacks %q:\n%s", s, r.Stderr)
				}
			}
		})
	}
}

// A plugin that speaks only protocol 1 (as an SDK before 0.3.0 built it) is refused at start with exit 2, at
// once even without --once (no restart loop), naming the plugin, its version, what it offers and the newest
// version in the registries that speaks protocol 2: as a local binary, and as a version pinned in the config.
func TestSyncRefusesV1Plugin(t *testing.T) {
	e := harness.NewEnvWith(t, "datagen", "testdest")
	old := testplugins.BuildWithVars(t, "testdest", "main.protocols=1", "main.version=0.0.9")
	out := filepath.Join(e.Dir, "out")
	walURL := "file://" + filepath.Join(e.Dir, "wal")
	local := strings.Replace(harness.PipelineConfig(`{ rows: 10 }`, out, "", walURL, ""), `version: ">= 0.1"`, "path: "+old, 1)
	e.WriteConfig(local)
	start := time.Now()
	r := e.Run("sync")
	if r.Code != 2 {
		t.Fatalf("sync with a v1-only local plugin: exit %d, want 2\n%s", r.Code, r.Stderr)
	}
	for _, s := range []string{"connection out", "plugin testdest 0.0.9", "offers protocol versions [1]", "this engine speaks protocol versions [2]",
		"the newest version of testdest that speaks protocol [2] is 0.1.0", "remove the connection's `path:`"} {
		if !strings.Contains(r.Stderr, s) {
			t.Errorf("stderr lacks %q:\n%s", s, r.Stderr)
		}
	}
	if strings.Contains(r.Stderr, "restarting") || strings.Count(r.Stderr, "needs a person") != 1 || time.Since(start) > time.Minute {
		t.Errorf("a refused plugin must fail the pipeline once, without a restart (took %v):\n%s", time.Since(start), r.Stderr)
	}

	// The same plugin published as testdest 0.0.9 and asked for by version.
	keys := filepath.Join(e.Dir, "keys")
	e.MustRun("registry", "add", e.Registry, old, "--name", "testdest", "--version", "0.0.9", "--os", "linux", "--arch", "amd64")
	e.MustRun("registry", "sign", e.Registry, "--key", filepath.Join(keys, "skippr-ed25519.key"))
	e.WriteConfig(strings.Replace(local, "path: "+old, `version: "0.0.9"`, 1))
	r = e.Run("sync", "--once")
	if r.Code != 2 {
		t.Fatalf("sync with testdest 0.0.9 (protocol 1) pinned: exit %d, want 2\n%s", r.Code, r.Stderr)
	}
	for _, s := range []string{"plugin testdest", "0.0.9 (speaks protocol [1], the engine speaks [2])", "newest version that works with this engine and platform: 0.1.0"} {
		if !strings.Contains(r.Stderr, s) {
			t.Errorf("stderr lacks %q:\n%s", s, r.Stderr)
		}
	}
}

func TestSecondWriterRefused(t *testing.T) {
	e := harness.NewEnv(t)
	out := filepath.Join(e.Dir, "out")
	e.WriteConfig(harness.PipelineConfig(`{ rows: 0, rows_per_second: 1000, batch_size: 100 }`, out, "", "file://"+filepath.Join(e.Dir, "wal"), ""))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := e.Cmd(ctx, "sync")
	var firstErr bytes.Buffer
	first.Stderr = &firstErr
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	defer first.Process.Kill()
	harness.WaitFor(t, 30*time.Second, func() bool { return strings.Contains(e.Run("status").Stdout, "running") })
	r := e.Run("sync", "--once")
	if r.Code != 5 || !strings.Contains(r.Stderr, "locked") {
		t.Fatalf("second sync: exit %d, want 5 (WAL held)\n%s", r.Code, r.Stderr)
	}
}

func TestConnectAddsAndChecks(t *testing.T) {
	e := harness.NewEnv(t)
	e.WriteConfig("# our pipelines\n")
	r := e.MustRun("connect", "gen", "--plugin", "datagen", "--version", "~> 0.1", "--set", "rows=100", "--set", "seed=3")
	if !strings.Contains(r.Stdout, "connection gen ok") {
		t.Fatalf("connect: %s", r.Stdout)
	}
	b, err := os.ReadFile(filepath.Join(e.Dir, "skippr.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "# our pipelines") || !strings.Contains(string(b), "rows: 100") {
		t.Fatalf("config after connect:\n%s", b)
	}
	r = e.Run("connect", "gen", "--plugin", "datagen", "--set", "rows=100")
	if r.Code != 2 || !strings.Contains(r.Stderr, "exists") {
		t.Fatalf("adding an existing connection: exit %d\n%s", r.Code, r.Stderr)
	}
	r = e.Run("connect", "gen", "--plugin", "datagen", "--set", "batch_size=0", "--replace")
	if r.Code != 2 || !strings.Contains(r.Stderr, "connections.gen.settings.batch_size") {
		t.Fatalf("bad setting: exit %d, want 2 naming the key\n%s", r.Code, r.Stderr)
	}
	e.MustRun("connect", "gen", "--plugin", "datagen", "--set", "nested=true", "--replace")
	r = e.MustRun("discover", "gen", "--json")
	var streams []struct {
		Name       string   `json:"name"`
		PrimaryKey []string `json:"primary_key"`
		Fields     []struct {
			Name string `json:"name"`
			Type string `json:"type"`
		} `json:"fields"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &streams); err != nil {
		t.Fatalf("discover --json: %v\n%s", err, r.Stdout)
	}
	if len(streams) != 1 || streams[0].Name != "events" || len(streams[0].PrimaryKey) != 1 || len(streams[0].Fields) != 7 {
		t.Fatalf("discover: %+v", streams)
	}
}

// With apply paused, committed entries stay in the WAL; `wal inspect` lists and verifies them and names a
// corrupt segment; apply then stops at that segment instead of skipping it, and the coalesced range holding it
// commits nothing.
func TestWALInspectAndCorruptSegment(t *testing.T) {
	e := harness.NewEnv(t)
	walDir := filepath.Join(e.Dir, "wal")
	out := filepath.Join(e.Dir, "out")
	cfg := harness.PipelineConfig(`{ rows: 3000, batch_size: 300 }`, out, "", "file://"+walDir, "      group_commit: { max_bytes: 1KiB }\n")
	e.WriteConfig(cfg + "    apply: { paused: true }\n")
	e.MustRun("sync", "--once")
	var inspect struct {
		LastSeq uint64 `json:"last_seq"`
		Bad     int    `json:"bad"`
		Entries []struct {
			Seq     uint64           `json:"seq"`
			Segment string           `json:"segment"`
			Rows    map[string]int64 `json:"rows"`
			OK      bool             `json:"ok"`
		} `json:"entries"`
	}
	r := e.MustRun("wal", "inspect", "file://"+walDir, "--json")
	if err := json.Unmarshal([]byte(r.Stdout), &inspect); err != nil {
		t.Fatalf("wal inspect --json: %v\n%s", err, r.Stdout)
	}
	var rows int64
	for _, en := range inspect.Entries {
		rows += en.Rows["events"]
	}
	if inspect.LastSeq < 2 || len(inspect.Entries) != int(inspect.LastSeq) || inspect.Bad != 0 || rows != 3000 {
		t.Fatalf("inspect: %+v", inspect)
	}
	seg := inspect.Entries[1].Segment
	path := filepath.Join(walDir, filepath.FromSlash(seg))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("segment %s: %v", seg, err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	r = e.Run("wal", "inspect", "file://"+walDir)
	if r.Code != 1 || !strings.Contains(r.Stdout+r.Stderr, filepath.Base(path)) {
		t.Fatalf("inspect of a corrupt log: exit %d, want 1 naming %s\n%s%s", r.Code, filepath.Base(path), r.Stdout, r.Stderr)
	}
	e.WriteConfig(cfg)
	r = e.Run("sync", "--once")
	if r.Code != 1 || !strings.Contains(r.Stderr, "wal entry 2") || !strings.Contains(r.Stderr, filepath.Base(path)) {
		t.Fatalf("sync over a corrupt segment: exit %d, want 1 naming entry 2 and its segment\n%s", r.Code, r.Stderr)
	}
	// status shows the failure, the entry and its segment, and the way out; and exits 1.
	r = e.Run("status")
	if r.Code != 1 || !strings.Contains(r.Stdout, "orders: failed: ") || !strings.Contains(r.Stdout, "wal entry: 2 (segment "+seg+")") ||
		!strings.Contains(r.Stdout, "fix: re-snapshot the affected tables") {
		t.Fatalf("status after a corrupt segment: exit %d, want 1 with the entry and the fix\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	st, err := filedest.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	// testdest coalesces: the range 1..N holding entry 2 was aborted whole, so nothing, not even entry 1, is in.
	if len(st.Sequences["orders"]) != 0 {
		t.Fatalf("applied %v, want nothing: the range with the corrupt entry must not commit", st.Sequences["orders"])
	}
}
