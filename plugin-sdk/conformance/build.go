package conformance

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Build compiles the plugin main package in dir into a temporary binary and returns its path.
func Build(t testing.TB, dir string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "skippr-plugin-"+filepath.Base(dir))
	cmd := exec.Command("go", "build", "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = os.Environ()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build plugin %s: %v\n%s", dir, err, b)
	}
	return out
}
