package main_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skippr-dev/skippr/internal/testplugins"
)

// A third party publishes a plugin built outside this repository's workspace — a copy of datagen renamed
// "acmegen", in its own module that depends on plugin-sdk only — in a registry of its own; a user trusts that
// registry's key, installs the plugin with a version constraint and runs a pipeline with it.
func TestThirdPartyPluginFlow(t *testing.T) {
	root := testplugins.Root(t)
	work := t.TempDir()
	mod := filepath.Join(work, "acmegen")
	copyTree(t, filepath.Join(root, "plugins", "datagen"), mod)
	gomod := fmt.Sprintf(`module example.com/acmegen

go 1.26.0

require github.com/skippr-dev/skippr/plugin-sdk v0.0.0

replace github.com/skippr-dev/skippr/plugin-sdk => %s
`, filepath.Join(root, "plugin-sdk"))
	if err := os.WriteFile(filepath.Join(mod, "go.mod"), []byte(gomod), 0o644); err != nil {
		t.Fatal(err)
	}
	// Rename the module's own imports and the plugin's name.
	filepath.WalkDir(mod, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") {
			return err
		}
		b, _ := os.ReadFile(p)
		s := strings.ReplaceAll(string(b), "github.com/skippr-dev/skippr/plugins/datagen", "example.com/acmegen")
		s = strings.ReplaceAll(s, `Name: "datagen"`, `Name: "acmegen"`)
		return os.WriteFile(p, []byte(s), 0o644)
	})
	tidy := exec.Command("go", "mod", "tidy")
	tidy.Dir, tidy.Env = mod, append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	if out, err := tidy.CombinedOutput(); err != nil {
		t.Fatalf("go mod tidy: %v\n%s", err, out)
	}
	versions := []string{"1.0.0", "1.1.0", "2.0.0"}
	bins := map[string]string{}
	for _, v := range versions {
		bins[v] = filepath.Join(work, v, "skippr-plugin-acmegen")
		build := exec.Command("go", "build", "-ldflags", "-X main.version="+v, "-o", bins[v], ".")
		build.Dir, build.Env = mod, append(os.Environ(), "GOWORK=off")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("build the third-party plugin outside the workspace: %v\n%s", err, out)
		}
	}

	e := newEnv(t) // the user's side, with the project's registry for testdest
	acme := filepath.Join(work, "acme-registry")
	keys := filepath.Join(work, "acme-keys")
	e.mustRun("registry", "keygen", "--out", keys)
	for _, v := range versions {
		// The protocol version is read from the binary itself.
		e.mustRun("registry", "add", acme, bins[v], "--name", "acmegen", "--version", v, "--os", "linux", "--arch", "amd64")
	}
	e.mustRun("registry", "sign", acme, "--key", filepath.Join(keys, "skippr-ed25519.key"))

	// Untrusted: refused.
	r := e.run("plugin", "install", "acmegen@~> 1.0", "--registry", "file://"+acme)
	if r.code == 0 {
		t.Fatalf("install from an untrusted registry succeeded:\n%s", r.stderr)
	}
	e.mustRun("registry", "trust", "file://"+acme, "--key", filepath.Join(keys, "skippr-ed25519.pub"))

	out := filepath.Join(e.dir, "out")
	e.writeConfig(fmt.Sprintf(`connections:
  gen:
    plugin: acmegen
    version: "~> 1.0"
    settings: { rows: 2000, batch_size: 500 }
  out:
    plugin: testdest
    version: "~> 0.1"
    settings: { dir: %s }
pipelines:
  p:
    source: gen
    destinations: [out]
    wal:
      url: file://%s
`, out, filepath.Join(e.dir, "wal")))
	e.mustRun("sync", "--once")
	r = e.mustRun("plugin", "list", "--json")
	if !strings.Contains(r.stdout, `"acmegen"`) || !strings.Contains(r.stdout, `"1.1.0"`) {
		t.Fatalf("`~> 1.0` should have installed acmegen 1.1.0:\n%s", r.stdout)
	}
	lock, err := os.ReadFile(filepath.Join(e.dir, "skippr.lock"))
	if err != nil || !strings.Contains(string(lock), `"1.1.0"`) {
		t.Fatalf("lock does not pin acmegen 1.1.0: %v\n%s", err, lock)
	}
}

func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if strings.HasSuffix(p, "_test.go") || d.Name() == "go.mod" || d.Name() == "go.sum" {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}
