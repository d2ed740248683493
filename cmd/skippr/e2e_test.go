package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/engine/pipeline"
	"github.com/skippr-dev/skippr/internal/testplugins"
	"github.com/skippr-dev/skippr/plugin-sdk/client"
	"github.com/skippr-dev/skippr/plugin-sdk/conformance/filedest"
	"github.com/skippr-dev/skippr/testkit/pgtest"
	"github.com/skippr-dev/skippr/testkit/s3test"
)

var versity s3test.Shared

// e2ePlugins are published into every test's registry.
var e2ePlugins = []string{"datagen", "testdest", "http", "postgres", "iceberg", "duckdb"}

func TestMain(m *testing.M) { pgtest.Main(m, versity.Stop, testplugins.Cleanup) }

// env is one user's machine: a home, a config directory, and a signed registry holding datagen and testdest,
// built from this tree and installed the way users install them.
type env struct {
	t        *testing.T
	dir      string
	home     string
	skippr   string
	registry string
	pubKey   string
	extraEnv []string
}

func newEnv(t *testing.T) *env { t.Helper(); return newEnvWith(t, e2ePlugins...) }

// newEnvWith is newEnv with a registry holding only the named plugins (less to build).
func newEnvWith(t *testing.T, plugins ...string) *env {
	t.Helper()
	e := &env{t: t, dir: t.TempDir(), skippr: testplugins.BuildSkippr(t)}
	e.home = filepath.Join(e.dir, "home")
	e.registry = filepath.Join(e.dir, "registry")
	keys := filepath.Join(e.dir, "keys")
	e.mustRun("registry", "keygen", "--out", keys)
	for _, name := range plugins {
		e.mustRun("registry", "add", e.registry, testplugins.Build(t, name), "--name", name, "--version", "0.1.0", "--os", "linux", "--arch", "amd64")
	}
	e.mustRun("registry", "sign", e.registry, "--key", filepath.Join(keys, "skippr-ed25519.key"))
	e.pubKey = filepath.Join(keys, "skippr-ed25519.pub")
	return e
}

func (e *env) cmd(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, e.skippr, args...)
	cmd.Dir = e.dir
	cmd.Env = append([]string{"SKIPPR_HOME=" + e.home, "PATH=" + os.Getenv("PATH"), "TMPDIR=" + os.TempDir()}, e.extraEnv...)
	return cmd
}

type result struct {
	stdout, stderr string
	code           int
}

func (e *env) run(args ...string) result {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := e.cmd(ctx, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		e.t.Fatalf("skippr %v: %v", args, err)
	}
	return result{out.String(), errb.String(), code}
}

func (e *env) mustRun(args ...string) result {
	e.t.Helper()
	r := e.run(args...)
	if r.code != 0 {
		e.t.Fatalf("skippr %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r
}

// writeConfig writes skippr.yml with the test's registry and the given connections and pipelines.
func (e *env) writeConfig(body string) {
	e.t.Helper()
	head := fmt.Sprintf("registries:\n  - url: file://%s\n    key_files: [%s]\n", e.registry, e.pubKey)
	if err := os.WriteFile(filepath.Join(e.dir, "skippr.yml"), []byte(head+body), 0o644); err != nil {
		e.t.Fatal(err)
	}
}

// pipelineConfig is datagen → testdest with a WAL at walURL (and walExtra under wal:).
func pipelineConfig(genSettings, outDir, destExtra, walURL, walExtra string) string {
	return fmt.Sprintf(`connections:
  gen:
    plugin: datagen
    version: "~> 0.1"
    settings: %s
  out:
    plugin: testdest
    version: ">= 0.1"
    settings: { dir: %s%s }
pipelines:
  orders:
    source: gen
    destinations: [out]
    wal:
      url: %s
%s`, genSettings, outDir, destExtra, walURL, walExtra)
}

// want is the state a destination must hold after datagen with these settings: read straight from the
// plugin, independent of the engine.
func want(t *testing.T, genSettings string) map[string]map[string]map[string]any {
	t.Helper()
	bin := testplugins.Build(t, "datagen")
	c, err := client.Start(context.Background(), client.Config{Path: bin, SHA256: testplugins.SHA256(t, bin)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Kill()
	js, err := yamlFlowToJSON(genSettings)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w, err := filedest.ReadSource(ctx, c, js)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// yamlFlowToJSON turns the tests' `{ key: value, … }` settings into JSON.
func yamlFlowToJSON(s string) ([]byte, error) {
	s = strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(s), "{"), "}"))
	m := map[string]json.RawMessage{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, ":")
		if !ok {
			return nil, fmt.Errorf("bad setting %q", kv)
		}
		m[strings.TrimSpace(k)] = json.RawMessage(strings.TrimSpace(v))
	}
	return json.Marshal(m)
}

func compare(t *testing.T, outDir string, want map[string]map[string]map[string]any) filedest.State {
	t.Helper()
	return comparePipeline(t, outDir, "orders", want)
}

// comparePipeline compares a testdest directory written by one pipeline with the source's rows.
func comparePipeline(t *testing.T, outDir, pipeline string, want map[string]map[string]map[string]any) filedest.State {
	t.Helper()
	st, err := filedest.Load(outDir)
	if err != nil {
		t.Fatal(err)
	}
	seqs := st.Sequences[pipeline]
	for i := 1; i < len(seqs); i++ {
		if seqs[i] != seqs[i-1]+1 {
			t.Fatalf("WAL sequence numbers applied out of order or twice: %v", seqs)
		}
	}
	var missing, extra, differ int
	for stream, rows := range want {
		got := st.Tables[stream]
		for k, v := range rows {
			g, ok := got[k]
			switch {
			case !ok:
				missing++
			case !reflect.DeepEqual(g, v):
				differ++
			}
		}
		for k := range got {
			if _, ok := rows[k]; !ok {
				extra++
			}
		}
		t.Logf("stream %s: source %d rows, destination %d rows; missing %d, extra %d, different %d", stream, len(rows), len(got), missing, extra, differ)
	}
	if missing+extra+differ > 0 || len(st.Tables) != len(want) {
		t.Fatalf("destination differs from source: missing %d, extra %d, different %d", missing, extra, differ)
	}
	return st
}

func TestSyncInstallsOnFirstUseAndIsExactlyOnce(t *testing.T) {
	e := newEnv(t)
	gen := `{ seed: 5, rows: 30000, batch_size: 1000, nested: true, update_ratio: 0.2, delete_ratio: 0.05 }`
	out := filepath.Join(e.dir, "out")
	e.writeConfig(pipelineConfig(gen, out, "", "file://"+filepath.Join(e.dir, "wal"), ""))
	r := e.mustRun("sync", "--once", "--log-format", "json")
	if !strings.Contains(r.stderr, "installed plugin") {
		t.Errorf("first sync did not install the plugins:\n%s", r.stderr)
	}
	w := want(t, gen)
	compare(t, out, w)
	// The summary on stdout, one JSON object: rows per stream, every stream the destination holds.
	var sum pipeline.Summary
	if err := json.Unmarshal([]byte(r.stdout), &sum); err != nil {
		t.Fatalf("sync --once summary: %v\n%s", err, r.stdout)
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
	b, err := os.ReadFile(filepath.Join(e.dir, "skippr.lock"))
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
	r = e.mustRun("sync", "--once", "--offline")
	compare(t, out, w)
	if !regexp.MustCompile(`orders +\(all\) +0\n0 rows in .* \(0 rows/s\)`).MatchString(r.stdout) {
		t.Errorf("sync --once printed no text summary:\n%s", r.stdout)
	}

	var st []struct {
		Pipeline string `json:"pipeline"`
		WAL      struct {
			LastCommitted    uint64 `json:"last_committed"`
			ReclaimedThrough uint64 `json:"reclaimed_through"`
			Entries          int    `json:"entries"`
		} `json:"wal"`
	}
	r = e.mustRun("status", "--json")
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, r.stdout)
	}
	if len(st) != 1 || st[0].WAL.LastCommitted == 0 || st[0].WAL.ReclaimedThrough != st[0].WAL.LastCommitted || st[0].WAL.Entries != 0 {
		t.Fatalf("status: %+v", st)
	}

	// A tampered installed binary refuses to start.
	bin := filepath.Join(e.home, "plugins", "testdest", "0.1.0", "skippr-plugin-testdest")
	f, err := os.OpenFile(bin, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("tampered"))
	f.Close()
	r = e.run("sync", "--once", "--offline")
	if r.code != 4 || !strings.Contains(r.stderr, "testdest") {
		t.Fatalf("sync with a tampered plugin: exit %d, want 4 naming the plugin\n%s", r.code, r.stderr)
	}
}

func TestSyncRefusals(t *testing.T) {
	e := newEnv(t)
	out := filepath.Join(e.dir, "out")
	walURL := "file://" + filepath.Join(e.dir, "wal")
	for _, tc := range []struct {
		name     string
		config   string
		args     []string
		code     int
		contains []string
	}{
		{
			name:     "exactly-once into a destination without it",
			config:   pipelineConfig(`{ rows: 10 }`, out, ", at_least_once: true", walURL, ""),
			code:     2,
			contains: []string{"asks for exactly-once", "destination out cannot honour it"},
		},
		{
			name:     "config error names file, line and key",
			config:   pipelineConfig(`{ rows: 10 }`, out, "", walURL, "    delivery: exactly-twice\n"),
			code:     2,
			contains: []string{"skippr.yml:", "delivery"},
		},
		{
			name:     "settings violate the plugin's schema",
			config:   pipelineConfig(`{ rows: -5 }`, out, "", walURL, ""),
			code:     2,
			contains: []string{"skippr.yml:", "connections.gen.settings.rows"},
		},
		{
			// The local registry answers without it: no suggestion-less DNS failure of the public one.
			name:     "misspelt plugin name",
			config:   strings.Replace(pipelineConfig(`{ rows: 10 }`, out, "", walURL, ""), "plugin: testdest", "plugin: testdst", 1),
			code:     3,
			contains: []string{"no plugin testdst in file://" + e.registry + "; did you mean testdest?"},
		},
		{
			name:     "unknown pipeline",
			config:   pipelineConfig(`{ rows: 10 }`, out, "", walURL, ""),
			args:     []string{"nope"},
			code:     2,
			contains: []string{`no pipeline "nope"`, "orders"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.writeConfig(tc.config)
			r := e.run(append([]string{"sync", "--once"}, tc.args...)...)
			if r.code != tc.code {
				t.Fatalf("exit %d, want %d\n%s", r.code, tc.code, r.stderr)
			}
			for _, s := range tc.contains {
				if !strings.Contains(r.stderr, s) {
					t.Errorf("stderr lacks %q:\n%s", s, r.stderr)
				}
			}
		})
	}
}

// A plugin that speaks only protocol 1 (as an SDK before 0.3.0 built it) is refused at start with exit 2, at
// once even without --once (no restart loop), naming the plugin, its version, what it offers and the newest
// version in the registries that speaks protocol 2: as a local binary, and as a version pinned in the config.
func TestSyncRefusesV1Plugin(t *testing.T) {
	e := newEnvWith(t, "datagen", "testdest")
	old := testplugins.BuildWithVars(t, "testdest", "main.protocols=1", "main.version=0.0.9")
	out := filepath.Join(e.dir, "out")
	walURL := "file://" + filepath.Join(e.dir, "wal")
	local := strings.Replace(pipelineConfig(`{ rows: 10 }`, out, "", walURL, ""), `version: ">= 0.1"`, "path: "+old, 1)
	e.writeConfig(local)
	start := time.Now()
	r := e.run("sync")
	if r.code != 2 {
		t.Fatalf("sync with a v1-only local plugin: exit %d, want 2\n%s", r.code, r.stderr)
	}
	for _, s := range []string{"connection out", "plugin testdest 0.0.9", "offers protocol versions [1]", "this engine speaks protocol versions [2]",
		"the newest version of testdest that speaks protocol [2] is 0.1.0", "remove the connection's `path:`"} {
		if !strings.Contains(r.stderr, s) {
			t.Errorf("stderr lacks %q:\n%s", s, r.stderr)
		}
	}
	if strings.Contains(r.stderr, "restarting") || strings.Count(r.stderr, "needs a person") != 1 || time.Since(start) > time.Minute {
		t.Errorf("a refused plugin must fail the pipeline once, without a restart (took %v):\n%s", time.Since(start), r.stderr)
	}

	// The same plugin published as testdest 0.0.9 and asked for by version.
	keys := filepath.Join(e.dir, "keys")
	e.mustRun("registry", "add", e.registry, old, "--name", "testdest", "--version", "0.0.9", "--os", "linux", "--arch", "amd64")
	e.mustRun("registry", "sign", e.registry, "--key", filepath.Join(keys, "skippr-ed25519.key"))
	e.writeConfig(strings.Replace(local, "path: "+old, `version: "0.0.9"`, 1))
	r = e.run("sync", "--once")
	if r.code != 2 {
		t.Fatalf("sync with testdest 0.0.9 (protocol 1) pinned: exit %d, want 2\n%s", r.code, r.stderr)
	}
	for _, s := range []string{"plugin testdest", "0.0.9 (speaks protocol [1], the engine speaks [2])", "newest version that works with this engine and platform: 0.1.0"} {
		if !strings.Contains(r.stderr, s) {
			t.Errorf("stderr lacks %q:\n%s", s, r.stderr)
		}
	}
}

func TestSecondWriterRefused(t *testing.T) {
	e := newEnv(t)
	out := filepath.Join(e.dir, "out")
	e.writeConfig(pipelineConfig(`{ rows: 0, rows_per_second: 1000, batch_size: 100 }`, out, "", "file://"+filepath.Join(e.dir, "wal"), ""))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := e.cmd(ctx, "sync")
	var firstErr bytes.Buffer
	first.Stderr = &firstErr
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	defer first.Process.Kill()
	waitFor(t, 30*time.Second, func() bool { return strings.Contains(e.run("status").stdout, "running") })
	r := e.run("sync", "--once")
	if r.code != 5 || !strings.Contains(r.stderr, "locked") {
		t.Fatalf("second sync: exit %d, want 5 (WAL held)\n%s", r.code, r.stderr)
	}
}

func waitFor(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s", d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestConnectAddsAndChecks(t *testing.T) {
	e := newEnv(t)
	e.writeConfig("# our pipelines\n")
	r := e.mustRun("connect", "gen", "--plugin", "datagen", "--version", "~> 0.1", "--set", "rows=100", "--set", "seed=3")
	if !strings.Contains(r.stdout, "connection gen ok") {
		t.Fatalf("connect: %s", r.stdout)
	}
	b, err := os.ReadFile(filepath.Join(e.dir, "skippr.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "# our pipelines") || !strings.Contains(string(b), "rows: 100") {
		t.Fatalf("config after connect:\n%s", b)
	}
	r = e.run("connect", "gen", "--plugin", "datagen", "--set", "rows=100")
	if r.code != 2 || !strings.Contains(r.stderr, "exists") {
		t.Fatalf("adding an existing connection: exit %d\n%s", r.code, r.stderr)
	}
	r = e.run("connect", "gen", "--plugin", "datagen", "--set", "batch_size=0", "--replace")
	if r.code != 2 || !strings.Contains(r.stderr, "connections.gen.settings.batch_size") {
		t.Fatalf("bad setting: exit %d, want 2 naming the key\n%s", r.code, r.stderr)
	}
	e.mustRun("connect", "gen", "--plugin", "datagen", "--set", "nested=true", "--replace")
	r = e.mustRun("discover", "gen", "--json")
	var streams []struct {
		Name       string   `json:"name"`
		PrimaryKey []string `json:"primary_key"`
		Fields     []struct {
			Name string `json:"name"`
			Type string `json:"type"`
		} `json:"fields"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &streams); err != nil {
		t.Fatalf("discover --json: %v\n%s", err, r.stdout)
	}
	if len(streams) != 1 || streams[0].Name != "events" || len(streams[0].PrimaryKey) != 1 || len(streams[0].Fields) != 7 {
		t.Fatalf("discover: %+v", streams)
	}
}

// With apply paused, committed entries stay in the WAL; `wal inspect` lists and verifies them and names a
// corrupt segment; apply then stops at that segment instead of skipping it, and the coalesced range holding it
// commits nothing.
func TestWALInspectAndCorruptSegment(t *testing.T) {
	e := newEnv(t)
	walDir := filepath.Join(e.dir, "wal")
	out := filepath.Join(e.dir, "out")
	cfg := pipelineConfig(`{ rows: 3000, batch_size: 300 }`, out, "", "file://"+walDir, "      group_commit: { max_bytes: 1KiB }\n")
	e.writeConfig(cfg + "    apply: { paused: true }\n")
	e.mustRun("sync", "--once")
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
	r := e.mustRun("wal", "inspect", "file://"+walDir, "--json")
	if err := json.Unmarshal([]byte(r.stdout), &inspect); err != nil {
		t.Fatalf("wal inspect --json: %v\n%s", err, r.stdout)
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
	r = e.run("wal", "inspect", "file://"+walDir)
	if r.code != 1 || !strings.Contains(r.stdout+r.stderr, filepath.Base(path)) {
		t.Fatalf("inspect of a corrupt log: exit %d, want 1 naming %s\n%s%s", r.code, filepath.Base(path), r.stdout, r.stderr)
	}
	e.writeConfig(cfg)
	r = e.run("sync", "--once")
	if r.code != 1 || !strings.Contains(r.stderr, "wal entry 2") || !strings.Contains(r.stderr, filepath.Base(path)) {
		t.Fatalf("sync over a corrupt segment: exit %d, want 1 naming entry 2 and its segment\n%s", r.code, r.stderr)
	}
	// status shows the failure, the entry and its segment, and the way out; and exits 1.
	r = e.run("status")
	if r.code != 1 || !strings.Contains(r.stdout, "orders: failed: ") || !strings.Contains(r.stdout, "wal entry: 2 (segment "+seg+")") ||
		!strings.Contains(r.stdout, "fix: re-snapshot the affected tables") {
		t.Fatalf("status after a corrupt segment: exit %d, want 1 with the entry and the fix\n%s%s", r.code, r.stdout, r.stderr)
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
