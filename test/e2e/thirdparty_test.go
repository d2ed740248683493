package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/skippr-dev/skippr/internal/testplugins"
	"github.com/skippr-dev/skippr/plugin-sdk/conformance/filedest"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
	"github.com/skippr-dev/skippr/test/harness"
)

// exampleFiles returns the files plugin-sdk/README.md shows after `<!-- MARKER: NAME -->` lines (the worked
// examples' files), failing the test when one of want is missing.
func exampleFiles(t *testing.T, root, marker string, want ...string) map[string]string {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join(root, "plugin-sdk", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?s)<!-- " + regexp.QuoteMeta(marker) + ": (\\S+) -->\n```[a-z]*\n(.*?)\n```\n")
	files := map[string]string{}
	for _, m := range block.FindAllStringSubmatch(string(readme), -1) {
		files[m[1]] = m[2] + "\n"
	}
	for _, name := range want {
		if files[name] == "" {
			t.Fatalf("plugin-sdk/README.md has no example file %s (a block after `<!-- %s: %s -->`)", name, marker, name)
		}
	}
	return files
}

// readmeExample returns the CSV source's files as plugin-sdk/README.md shows them.
func readmeExample(t *testing.T, root string) map[string]string {
	t.Helper()
	return exampleFiles(t, root, "example file", "go.mod", "main.go", "conformance_test.go")
}

// requirement returns the version a go.mod requires of a module, "" if none.
func requirement(gomod, module string) string {
	m := regexp.MustCompile(`(?m)^\s*(?:require\s+)?` + regexp.QuoteMeta(module) + `\s+(\S+)`).FindStringSubmatch(gomod)
	if m == nil {
		return ""
	}
	return m[1]
}

// A third party writes the CSV source of plugin-sdk/README.md's worked example, word for word, in a module of
// its own outside this repository's workspace; runs the conformance kit on it; publishes it in a registry of
// its own; a user trusts that registry's key, installs the plugin with a version constraint and copies a file
// with it into testdest, row by row. The only change to the README's files is a replace of the SDK by this
// checkout, as no SDK tag is fetched here.
func TestThirdPartyPluginFlow(t *testing.T) {
	root := testplugins.Root(t)
	files := readmeExample(t, root)
	sdkMod, err := os.ReadFile(filepath.Join(root, "plugin-sdk", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	const sdk, arrow = "github.com/skippr-dev/skippr/plugin-sdk", "github.com/apache/arrow-go/v18"
	if got, want := requirement(files["go.mod"], sdk), "v"+protocol.SDKVersion; got != want {
		t.Fatalf("README example go.mod requires the SDK at %q, protocol.SDKVersion is %s", got, want)
	}
	if got, want := requirement(files["go.mod"], arrow), requirement(string(sdkMod), arrow); got != want {
		t.Fatalf("README example go.mod requires arrow-go %q, the SDK's go.mod %q: they must be equal", got, want)
	}

	work := t.TempDir()
	gocmd := outsideModule(t, root, filepath.Join(work, "csvsource"), files, "the README's worked example")
	gocmd("mod", "tidy")
	gocmd("test", "-count=1", "./...") // the README's conformance test, outside the workspace
	versions := []string{"1.0.0", "1.1.0", "2.0.0"}
	bins := map[string]string{}
	for _, v := range versions {
		bins[v] = filepath.Join(work, v, "skippr-plugin-csvsource")
		gocmd("build", "-ldflags", "-X main.version="+v, "-o", bins[v], ".")
	}

	e := harness.NewEnv(t) // the user's side, with the project's registry for testdest
	acme := filepath.Join(work, "acme-registry")
	keys := filepath.Join(work, "acme-keys")
	e.MustRun("registry", "keygen", "--out", keys)
	for _, v := range versions {
		// The protocol version is read from the binary itself.
		e.MustRun("registry", "add", acme, bins[v], "--name", "csvsource", "--version", v, "--os", "linux", "--arch", "amd64")
	}
	e.MustRun("registry", "sign", acme, "--key", filepath.Join(keys, "skippr-ed25519.key"))

	// Untrusted: refused.
	r := e.Run("plugin", "install", "csvsource@~> 1.0", "--registry", "file://"+acme)
	if r.Code == 0 {
		t.Fatalf("install from an untrusted registry succeeded:\n%s", r.Stderr)
	}
	e.MustRun("registry", "trust", "file://"+acme, "--key", filepath.Join(keys, "skippr-ed25519.pub"))

	// 2,345 rows in batches of 500: five WAL entries, the last one short.
	const rows = 2345
	var csv strings.Builder
	csv.WriteString("id,name\n")
	for i := 1; i <= rows; i++ {
		fmt.Fprintf(&csv, "%d,\"person, %d\"\n", i, i)
	}
	input := filepath.Join(work, "people.csv")
	if err := os.WriteFile(input, []byte(csv.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(e.Dir, "out")
	e.WriteConfig(fmt.Sprintf(`connections:
  people:
    plugin: csvsource
    version: "~> 1.0"
    settings: { path: %s, batch_size: 500 }
  out:
    plugin: testdest
    version: "~> 0.1"
    settings: { dir: %s }
pipelines:
  p:
    source: people
    destinations: [out]
    wal:
      url: file://%s
`, input, out, filepath.Join(e.Dir, "wal")))
	e.MustRun("sync", "--once")
	r = e.MustRun("plugin", "list", "--json")
	if !strings.Contains(r.Stdout, `"csvsource"`) || !strings.Contains(r.Stdout, `"1.1.0"`) {
		t.Fatalf("`~> 1.0` should have installed csvsource 1.1.0:\n%s", r.Stdout)
	}
	lock, err := os.ReadFile(filepath.Join(e.Dir, "skippr.lock"))
	if err != nil || !strings.Contains(string(lock), `"1.1.0"`) {
		t.Fatalf("lock does not pin csvsource 1.1.0: %v\n%s", err, lock)
	}

	st, err := filedest.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	table := st.Tables["people"]
	if len(table) != rows || st.Rows != rows {
		t.Fatalf("testdest holds %d rows of people (%d applied), want %d", len(table), st.Rows, rows)
	}
	for i := 1; i <= rows; i++ {
		id := fmt.Sprint(i)
		got := table[fmt.Sprintf("%q", id)]
		if got["id"] != id || got["name"] != fmt.Sprintf("person, %d", i) {
			t.Fatalf("row %d in testdest: %v", i, got)
		}
	}
}

// outsideModule writes a README example's files into dir as a module of its own, outside this repository's
// workspace, with the SDK replaced by this checkout (no SDK tag is fetched here), and returns a runner of the go
// command in it (GOWORK=off) that fails t, naming what, when a command fails.
func outsideModule(t *testing.T, root, dir string, files map[string]string, what string) func(args ...string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	const sdk = "github.com/skippr-dev/skippr/plugin-sdk"
	files["go.mod"] += fmt.Sprintf("\nreplace %s => %s\n", sdk, filepath.Join(root, "plugin-sdk"))
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return func(args ...string) {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir, cmd.Env = dir, append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), what, err, out)
		}
	}
}
