package config

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// fragmentMark opens a ```yaml block that is not a whole skippr.yml (a few keys of a connection, a Kubernetes
// manifest): such a block must still be valid YAML, but is not loaded as a config.
const fragmentMark = "# fragment"

// yamlBlock is one ```yaml block of a markdown file, with the line its first content line is on.
type yamlBlock struct {
	file string
	line int
	body string
}

// yamlBlocks returns every ```yaml block of the markdown file path.
func yamlBlocks(t *testing.T, path string) []yamlBlock {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []yamlBlock
	var cur *yamlBlock
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case cur == nil && (trimmed == "```yaml" || trimmed == "```yml"):
			cur = &yamlBlock{file: path, line: n + 1}
		case cur != nil && trimmed == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.body += line + "\n"
		}
	}
	if cur != nil {
		t.Fatalf("%s:%d: ```yaml block never closed", path, cur.line)
	}
	return out
}

// docFiles is README.md, docs/*.md and plugins/*/README.md of the repository (plus the SDK's README, which
// shows a plugin author's config).
func docFiles(t *testing.T) []string {
	t.Helper()
	root := filepath.Join("..", "..")
	files := []string{filepath.Join(root, "README.md"), filepath.Join(root, "plugin-sdk", "README.md")}
	for _, pat := range []string{"docs/*.md", "plugins/*/README.md"} {
		m, err := filepath.Glob(filepath.Join(root, pat))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	return files
}

// TestDocsYAMLBlocksLoad holds the docs to the loader: every ```yaml block of the READMEs and docs/ is loaded
// with Parse, as `skippr sync` would load it, unless its first line is "# fragment" — then it must still parse
// as YAML. A documented key the loader refuses (like `apply: { paused: true }` on a destination connection)
// fails here, naming the file and line.
func TestDocsYAMLBlocksLoad(t *testing.T) {
	// Every ${VAR} resolves to a placeholder: the docs name variables the reader sets, not this test.
	env := func(name string) (string, bool) { return "placeholder-" + strings.ToLower(name), true }
	var whole, fragments int
	for _, f := range docFiles(t) {
		for _, b := range yamlBlocks(t, f) {
			first, _, _ := strings.Cut(strings.TrimLeft(b.body, "\n"), "\n")
			if strings.HasPrefix(strings.TrimSpace(first), fragmentMark) {
				fragments++
				dec := yaml.NewDecoder(strings.NewReader(b.body))
				for {
					var doc yaml.Node
					err := dec.Decode(&doc)
					if errors.Is(err, io.EOF) {
						break
					}
					if err != nil {
						t.Errorf("%s:%d: fragment is not valid YAML: %v", b.file, b.line, err)
						break
					}
				}
				continue
			}
			whole++
			// The path anchors relative paths (key files, ./registry) in the file's own directory.
			if _, err := Parse(filepath.Join(filepath.Dir(b.file), "skippr.yml"), []byte(b.body), env); err != nil {
				t.Errorf("%s:%d: a whole config (no %q mark) does not load:\n%v", b.file, b.line, fragmentMark, err)
			}
		}
	}
	if whole == 0 {
		t.Fatal("no whole config found in the docs: the block scanner is broken")
	}
	t.Logf("%d whole configs loaded, %d fragments parsed as YAML", whole, fragments)
}

// TestYAMLBlocksScanner checks the scanner on a file with a whole config, a fragment and a non-YAML block.
func TestYAMLBlocksScanner(t *testing.T) {
	md := "# t\n```sh\nskippr sync\n```\n```yaml\na: 1\n```\ntext\n```yaml\n# fragment\nb: [\n```\n"
	path := filepath.Join(t.TempDir(), "x.md")
	if err := os.WriteFile(path, []byte(md), 0o600); err != nil {
		t.Fatal(err)
	}
	got := yamlBlocks(t, path)
	if len(got) != 2 || got[0].body != "a: 1\n" || got[0].line != 6 || got[1].line != 10 {
		t.Fatalf("blocks = %+v", got)
	}
}
