// Package testplugins builds the repository's plugin binaries for tests, once per test process, so tests run
// real plugin processes built from the same source tree.
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
	return build(t, name, "skippr-plugin-"+name, filepath.Join("plugins", name), ".", nil)
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
	return build(t, key, filepath.Join(fmt.Sprintf("v%x", sha256.Sum256([]byte(key)))[:17], "skippr-plugin-"+name), filepath.Join("plugins", name), ".", nil, "-ldflags", strings.Join(flags, " "))
}

// BuildSkippr returns the path of the skippr command built from cmd/skippr as the release builds it: without cgo
// and with the Makefile's CORE_TAGS, which `make test` exports as SKIPPR_CORE_TAGS (so the tests run the code
// that ships, and `make check-size` reuses the compiled packages).
func BuildSkippr(t testing.TB) string {
	t.Helper()
	return build(t, "skippr", "skippr", ".", "./cmd/skippr", []string{"CGO_ENABLED=0"}, "-tags", os.Getenv("SKIPPR_CORE_TAGS"))
}

// BuildSkipprWithTags is BuildSkippr with more build tags (say "failpoints"), as a binary of its own beside it;
// BuildSkippr's build is untouched, and packages the tags do not change are shared in the build cache.
func BuildSkipprWithTags(t testing.TB, tags ...string) string {
	t.Helper()
	all := strings.Join(append(strings.Fields(os.Getenv("SKIPPR_CORE_TAGS")), tags...), " ")
	key := "skippr " + strings.Join(tags, " ")
	return build(t, key, filepath.Join(fmt.Sprintf("t%x", sha256.Sum256([]byte(key)))[:17], "skippr"), ".", "./cmd/skippr", []string{"CGO_ENABLED=0"}, "-tags", all)
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
