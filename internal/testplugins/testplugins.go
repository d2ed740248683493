// Package testplugins builds the repository's plugin binaries for tests, once per test process, so tests run
// real plugin processes built from the same source tree.
//
// `make test` (scripts/test.sh) builds the core and every plugin once before any test starts and names the
// folder in $SKIPPR_TEST_BINARIES; Build and BuildSkippr then use those files instead of linking the same
// binaries again in every test process (each link of a plugin is seconds of CPU, and CI's test processes run
// side by side on two cores). Without the variable, as under a bare `go test`, every process builds its own, so
// a test never runs a binary older than the source it was started from. The shared files are read-only to
// tests: a test that changes a binary changes its installed copy.
package testplugins

import (
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var (
	mu    sync.Mutex
	dir   string
	built = map[string]string{}
)

// Main runs the tests, then the cleanups, and removes the binaries. Call it from TestMain.
func Main(m *testing.M, cleanups ...func()) {
	code := m.Run()
	for _, c := range cleanups {
		c()
	}
	Cleanup()
	os.Exit(code)
}

// Cleanup removes the built binaries; for a TestMain that exits through another harness's Main.
func Cleanup() {
	mu.Lock()
	defer mu.Unlock()
	if dir != "" {
		os.RemoveAll(dir)
		dir = ""
	}
	built = map[string]string{}
}

// Root is the repository root (the directory holding go.work).
func Root(t testing.TB) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.work")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			t.Fatalf("no go.work above %s", wd)
		}
	}
}

// Build returns the path of plugins/<name> built as skippr-plugin-<name>.
func Build(t testing.TB, name string) string {
	t.Helper()
	if p := prebuilt("skippr-plugin-" + name); p != "" {
		return p
	}
	return build(t, name, "skippr-plugin-"+name, filepath.Join("plugins", name), ".", nil, "-tags", pluginTags(name))
}

// pluginTags are the build tags of plugins/<name> (the Makefile's PLUGIN_TAGS that matter): duckdb's arrow
// query format, which `skippr serve` uses, needs duckdb-go's Arrow results.
func pluginTags(name string) string {
	if name == "duckdb" {
		return "duckdb_arrow"
	}
	return ""
}

// BuildWithVars returns plugins/<name> built with -ldflags "-X <var>" for each var ("main.version=0.0.9"), as
// skippr-plugin-<name> in a folder of its own: a plugin as another release of it would be built.
func BuildWithVars(t testing.TB, name string, vars ...string) string {
	t.Helper()
	var flags []string
	for _, v := range vars {
		flags = append(flags, "-X", v)
	}
	key := name + " " + strings.Join(vars, " ")
	return build(t, key, filepath.Join(fmt.Sprintf("v%x", sha256.Sum256([]byte(key)))[:17], "skippr-plugin-"+name), filepath.Join("plugins", name), ".", nil, "-tags", pluginTags(name), "-ldflags", strings.Join(flags, " "))
}

// BuildSkippr returns the path of the skippr command built from cmd/skippr as the release builds it: without cgo
// and with the Makefile's CORE_TAGS, which `make test` exports as SKIPPR_CORE_TAGS (so the tests run the code
// that ships, and `make check-size` reuses the compiled packages).
//
// The companion skippr-serve (the Flight SQL server `skippr serve` runs, found beside the core) is built into
// the same folder.
func BuildSkippr(t testing.TB) string {
	t.Helper()
	if p := prebuilt("skippr"); p != "" && prebuilt("skippr-serve") != "" {
		return p
	}
	build(t, "skippr-serve", "skippr-serve", ".", "./cmd/skippr-serve", []string{"CGO_ENABLED=0"}, "-tags", os.Getenv("SKIPPR_CORE_TAGS"))
	return build(t, "skippr", "skippr", ".", "./cmd/skippr", []string{"CGO_ENABLED=0"}, "-tags", os.Getenv("SKIPPR_CORE_TAGS"))
}

// BuildSkipprWithTags is BuildSkippr with more build tags (say "failpoints"), as a binary of its own beside it;
// BuildSkippr's build is untouched, and packages the tags do not change are shared in the build cache. Its
// companion skippr-serve is built beside it with the same tags, so `skippr serve` runs them too.
func BuildSkipprWithTags(t testing.TB, tags ...string) string {
	t.Helper()
	all := strings.Join(append(strings.Fields(os.Getenv("SKIPPR_CORE_TAGS")), tags...), " ")
	key := "skippr " + strings.Join(tags, " ")
	folder := fmt.Sprintf("t%x", sha256.Sum256([]byte(key)))[:17]
	build(t, "skippr-serve "+strings.Join(tags, " "), filepath.Join(folder, "skippr-serve"), ".", "./cmd/skippr-serve", []string{"CGO_ENABLED=0"}, "-tags", all)
	return build(t, key, filepath.Join(folder, "skippr"), ".", "./cmd/skippr", []string{"CGO_ENABLED=0"}, "-tags", all)
}

// PrebuiltEnv names the folder of binaries scripts/test.sh built before the tests.
const PrebuiltEnv = "SKIPPR_TEST_BINARIES"

// prebuilt is the binary's path in $SKIPPR_TEST_BINARIES, or "" when the variable is unset or the folder lacks
// it (a plugin the script did not build is built here as before).
func prebuilt(binary string) string {
	d := os.Getenv(PrebuiltEnv)
	if d == "" {
		return ""
	}
	p := filepath.Join(d, binary)
	if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
		return ""
	}
	return p
}

func build(t testing.TB, key, binary, moduleDir, pkg string, env []string, flags ...string) string {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if p, ok := built[key]; ok {
		return p
	}
	if dir == "" {
		d, err := os.MkdirTemp("", "skippr-testplugins-")
		if err != nil {
			t.Fatal(err)
		}
		dir = d
	}
	out := filepath.Join(dir, binary)
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", append(append([]string{"build", "-o", out}, flags...), pkg)...)
	cmd.Dir = filepath.Join(Root(t), moduleDir)
	cmd.Env = append(os.Environ(), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", key, err, b)
	}
	built[key] = out
	return out
}

// SHA256 is the checksum of a file.
func SHA256(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(fmt.Errorf("checksum %s: %w", path, err))
	}
	s := sha256.Sum256(b)
	return s[:]
}
