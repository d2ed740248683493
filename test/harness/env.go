package harness

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
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/internal/testplugins"
	"github.com/skippr-dev/skippr/plugin-sdk/client"
	"github.com/skippr-dev/skippr/plugin-sdk/conformance/filedest"
	"github.com/skippr-dev/skippr/testkit/s3test"
)

var Versity s3test.Shared

// e2ePlugins are published into every test's registry.
var e2ePlugins = []string{"datagen", "testdest", "http", "postgres", "iceberg", "duckdb"}

// Env is one user's machine: a home, a config directory, and a signed registry holding datagen and testdest,
// built from this tree and installed the way users install them.
type Env struct {
	T        *testing.T
	Dir      string
	Home     string
	skippr   string
	Registry string
	pubKey   string
	ExtraEnv []string
}

func NewEnv(t *testing.T) *Env { t.Helper(); return NewEnvWith(t, e2ePlugins...) }

// NewEnvWith is newEnv with a registry holding only the named plugins (less to build).
func NewEnvWith(t *testing.T, plugins ...string) *Env {
	t.Helper()
	return NewEnvBinary(t, testplugins.BuildSkippr(t), plugins...)
}

// NewEnvBinary is NewEnvWith around a skippr binary built another way (with the failpoints tag, say).
func NewEnvBinary(t *testing.T, skippr string, plugins ...string) *Env {
	t.Helper()
	e := &Env{T: t, Dir: t.TempDir(), skippr: skippr}
	e.Home = filepath.Join(e.Dir, "home")
	e.Registry = filepath.Join(e.Dir, "registry")
	keys := filepath.Join(e.Dir, "keys")
	e.MustRun("registry", "keygen", "--out", keys)
	for _, name := range plugins {
		e.MustRun("registry", "add", e.Registry, testplugins.Build(t, name), "--name", name, "--version", "0.1.0", "--os", "linux", "--arch", "amd64")
	}
	e.MustRun("registry", "sign", e.Registry, "--key", filepath.Join(keys, "skippr-ed25519.key"))
	e.pubKey = filepath.Join(keys, "skippr-ed25519.pub")
	return e
}

// Cmd is `skippr args…` as the test's user runs it (its home, its directory), not started.
func (e *Env) Cmd(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, e.skippr, args...)
	cmd.Dir = e.Dir
	cmd.Env = append([]string{"SKIPPR_HOME=" + e.Home, "PATH=" + os.Getenv("PATH"), "TMPDIR=" + os.TempDir()}, e.ExtraEnv...)
	return cmd
}

// Result is a finished command: what it printed and its exit code.
type Result struct {
	Stdout, Stderr string
	Code           int
}

// Run runs `skippr args…` in the test's directory and returns its output and exit code; a run still going
// after two minutes is killed.
func (e *Env) Run(args ...string) Result {
	e.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := e.Cmd(ctx, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		e.T.Fatalf("skippr %v: %v", args, err)
	}
	return Result{out.String(), errb.String(), code}
}

// MustRunWhileProgressing is MustRun for a command whose length depends on the machine's load (a `sync --once`
// catching up): instead of a fixed limit it fails only when progress() — a fingerprint of what the command
// changes, such as WALProgress — and the command's stderr have both stayed the same for stall. A run that keeps
// moving is never cut short however slow the machine; a stuck one fails within stall.
func (e *Env) MustRunWhileProgressing(stall time.Duration, progress func() string, args ...string) Result {
	e.T.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := e.Cmd(ctx, args...)
	var out bytes.Buffer
	errb := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = &out, errb
	if err := cmd.Start(); err != nil {
		e.T.Fatalf("skippr %v: %v", args, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	watch := watchProgress(func() string { return progress() + "|stderr " + strconv.Itoa(len(errb.String())) }, stall)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var err error
wait:
	for {
		select {
		case err = <-done:
			break wait
		case <-tick.C:
			if watch.stalled() {
				cancel()
				<-done
				e.T.Fatalf("skippr %s: no progress for %s (last: %s)\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), stall, watch.last, out.String(), errb.String())
			}
		}
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		e.T.Fatalf("skippr %v: %v", args, err)
	}
	if code != 0 {
		e.T.Fatalf("skippr %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out.String(), errb.String())
	}
	return Result{out.String(), errb.String(), code}
}

// WALProgress fingerprints a local WAL directory (every file's path, size and modification time): it changes
// with every commit, checkpoint and reclaimed segment, so a run that writes to the WAL shows it is moving.
func WALProgress(t testing.TB, dir string) func() string {
	return func() string {
		var b strings.Builder
		err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, os.ErrNotExist) {
					return nil // a segment reclaimed while walking
				}
				return err
			}
			if info, err := d.Info(); err == nil {
				fmt.Fprintf(&b, "%s %d %d;", p, info.Size(), info.ModTime().UnixNano())
			}
			return nil
		})
		if err != nil {
			t.Errorf("walk %s: %v", dir, err)
		}
		return b.String()
	}
}

// MustRun is Run that fails the test unless the command exits 0.
func (e *Env) MustRun(args ...string) Result {
	e.T.Helper()
	r := e.Run(args...)
	if r.Code != 0 {
		e.T.Fatalf("skippr %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.Code, r.Stdout, r.Stderr)
	}
	return r
}

// WriteConfig writes skippr.yml with the test's registry and the given connections and pipelines.
func (e *Env) WriteConfig(body string) {
	e.T.Helper()
	head := fmt.Sprintf("registries:\n  - url: file://%s\n    key_files: [%s]\n", e.Registry, e.pubKey)
	if err := os.WriteFile(filepath.Join(e.Dir, "skippr.yml"), []byte(head+body), 0o644); err != nil {
		e.T.Fatal(err)
	}
}

// PipelineConfig is datagen → testdest with a WAL at walURL (and walExtra under wal:).
func PipelineConfig(genSettings, outDir, destExtra, walURL, walExtra string) string {
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

// Want is the state a destination must hold after datagen with these settings: read straight from the
// plugin, independent of the engine.
func Want(t *testing.T, genSettings string) map[string]map[string]map[string]any {
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
	if js, err = unpaced(js); err != nil {
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

// Paced adds rows_per_second to datagen's `{ … }` settings: a test that must signal or compact while rows flow
// paces that run, and runs the rest (and Want) unpaced, which yields the same events sooner.
func Paced(genSettings string, rowsPerSecond int) string {
	return strings.Replace(genSettings, "{ ", fmt.Sprintf("{ rows_per_second: %d, ", rowsPerSecond), 1)
}

// unpaced drops rows_per_second from datagen's JSON settings. Datagen makes every event from its index alone,
// so pacing changes when rows arrive, never which: the expected state read unpaced is the same, without waiting
// rows/rows_per_second seconds for it (4–5 s in six chaos tests).
func unpaced(js []byte) ([]byte, error) {
	m := map[string]json.RawMessage{}
	if err := json.Unmarshal(js, &m); err != nil {
		return nil, fmt.Errorf("datagen settings %s: %w", js, err)
	}
	delete(m, "rows_per_second")
	return json.Marshal(m)
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

func Compare(t *testing.T, outDir string, want map[string]map[string]map[string]any) filedest.State {
	t.Helper()
	return ComparePipeline(t, outDir, "orders", want)
}

// ComparePipeline compares a testdest directory written by one pipeline with the source's rows.
func ComparePipeline(t *testing.T, outDir, pipeline string, want map[string]map[string]map[string]any) filedest.State {
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

// WaitWhileProgressing waits for cond as long as progress() (a fingerprint such as WALProgress) keeps changing:
// it fails only when cond is still false and progress has stood still for stall. A loaded machine makes the
// wait longer, never a failure.
func WaitWhileProgressing(t *testing.T, stall time.Duration, progress func() string, cond func() bool) {
	t.Helper()
	watch := watchProgress(progress, stall)
	for !cond() {
		if watch.stalled() {
			t.Fatalf("condition not met, and no progress for %s (last: %s)", stall, watch.last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// progressWatch is the one stall rule of the waits above: progress() has returned the same fingerprint for
// longer than stall.
type progressWatch struct {
	progress func() string
	stall    time.Duration
	last     string
	movedAt  time.Time
}

func watchProgress(progress func() string, stall time.Duration) *progressWatch {
	return &progressWatch{progress: progress, stall: stall, last: progress(), movedAt: time.Now()}
}

// stalled takes a new fingerprint and reports whether the last change is more than stall ago.
func (w *progressWatch) stalled() bool {
	if now := w.progress(); now != w.last {
		w.last, w.movedAt = now, time.Now()
		return false
	}
	return time.Since(w.movedAt) > w.stall
}

func WaitFor(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s", d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
