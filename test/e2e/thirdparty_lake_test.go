package e2e

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/skippr-dev/skippr/internal/testplugins"
	"github.com/skippr-dev/skippr/test/harness"
)

// A third party writes plugin-sdk/README.md's lake destination, word for word, in a module of its own outside
// this repository's workspace (only a replace of the SDK by this checkout added), runs the conformance kit on
// it (lake-plan included), publishes it in a signed registry of its own, and syncs datagen's inserts, updates
// and deletes into it. `skippr query` through the stock duckdb engine must answer exactly the rows datagen's
// events leave, read from the datagen plugin: after an applied sync; with newer entries only in the paused
// pipeline's WAL (merged above the plan's fence, while --as-of-lake keeps the older rows); after apply resumes.
// With the newer entries in the WAL, the query engine is also chosen by config: `query: { connection: engine }`
// names a connection of a plugin not called duckdb (the duckdb binary by path), and without that line a
// connection of plugin duckdb whose binary offers no query.engine is chosen and refused by name.
func TestThirdPartyLakeQuery(t *testing.T) {
	root := testplugins.Root(t)
	files := exampleFiles(t, root, "lake example file", "go.mod", "main.go", "conformance_test.go")
	sdkMod, err := os.ReadFile(filepath.Join(root, "plugin-sdk", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	const arrow = "github.com/apache/arrow-go/v18"
	if got, want := requirement(files["go.mod"], arrow), requirement(string(sdkMod), arrow); got != want {
		t.Fatalf("README lake example go.mod requires arrow-go %q, the SDK's go.mod %q: they must be equal", got, want)
	}

	work := t.TempDir()
	gocmd := outsideModule(t, root, filepath.Join(work, "lakedest"), files, "the README's lake example")
	gocmd("mod", "tidy")
	gocmd("test", "-count=1", "./...")
	bin := filepath.Join(work, "skippr-plugin-lakedest")
	gocmd("build", "-ldflags", "-X main.version=1.0.0", "-o", bin, ".")

	e := harness.NewEnvWith(t, "datagen", "duckdb")
	acme, keys := filepath.Join(work, "acme-registry"), filepath.Join(work, "acme-keys")
	e.MustRun("registry", "keygen", "--out", keys)
	e.MustRun("registry", "add", acme, bin, "--name", "lakedest", "--version", "1.0.0", "--os", "linux", "--arch", "amd64")
	e.MustRun("registry", "sign", acme, "--key", filepath.Join(keys, "skippr-ed25519.key"))
	e.MustRun("registry", "trust", "file://"+acme, "--key", filepath.Join(keys, "skippr-ed25519.pub"))

	gen := func(rows int) string {
		return fmt.Sprintf("{ rows: %d, batch_size: 250, update_ratio: 0.3, delete_ratio: 0.1 }", rows)
	}
	config := func(rows int, paused bool, extra string) {
		e.WriteConfig(fmt.Sprintf(`connections:
  gen:
    plugin: datagen
    version: "~> 0.1"
    settings: %s
  lake:
    plugin: lakedest
    version: "~> 1.0"
    settings: { dir: %s, namespace: shop }
%spipelines:
  orders:
    source: gen
    destinations: [lake]
    apply: { paused: %v }
    wal:
      url: file://%s
      group_commit: { max_bytes: 16KiB, max_delay: 50ms }
`, gen(rows), filepath.Join(e.Dir, "lake"), extra, paused, filepath.Join(e.Dir, "wal")))
	}
	const sql = "SELECT id, seq, name, amount FROM shop.events ORDER BY id"
	// equal checks a query's rows against what datagen's first rows events leave, row by row.
	equal := func(what string, got []any, rows int) {
		t.Helper()
		want := harness.Want(t, gen(rows))["events"]
		var ids []int
		byID := map[int]map[string]any{}
		for _, w := range want {
			id, err := strconv.Atoi(fmt.Sprint(w["id"]))
			if err != nil {
				t.Fatalf("datagen id %v: %v", w["id"], err)
			}
			ids, byID[id] = append(ids, id), w
		}
		sort.Ints(ids)
		if len(got) != len(ids) {
			t.Fatalf("%s: %d rows, datagen's %d events leave %d", what, len(got), rows, len(ids))
		}
		for i, id := range ids {
			g, w := got[i].(map[string]any), byID[id]
			amount, err := strconv.ParseFloat(fmt.Sprint(w["amount"]), 64)
			if err != nil {
				t.Fatalf("datagen amount %v: %v", w["amount"], err)
			}
			if g["id"] != float64(id) || fmt.Sprint(g["seq"]) != fmt.Sprint(w["seq"]) || g["name"] != w["name"] || g["amount"] != amount {
				t.Fatalf("%s: row %d is %v, datagen's %d events leave %v", what, i, g, rows, w)
			}
		}
	}

	config(2000, false, "")
	e.MustRun("sync", "--once")
	equal("query after an applied sync", e.QueryJSON(sql, false), 2000)
	equal("query --as-of-lake after an applied sync", e.QueryJSON(sql, true), 2000)

	config(3000, true, "")
	e.MustRun("sync", "--once") // events 2000-2999 are only in the WAL
	equal("query with 1000 events only in the WAL", e.QueryJSON(sql, false), 3000)
	equal("query --as-of-lake with 1000 events only in the WAL", e.QueryJSON(sql, true), 2000)

	// The query engine by config: the duckdb binary as plugin acmesql, by path.
	engine := filepath.Join(work, "acmesql")
	copyExecutable(t, testplugins.Build(t, "duckdb"), engine)
	decoy := fmt.Sprintf("  decoy:\n    plugin: duckdb\n    path: %s\n", bin) // plugin duckdb, but lakedest's binary
	config(3000, true, decoy+fmt.Sprintf("  engine:\n    plugin: acmesql\n    path: %s\n", engine))
	r := e.Run("query", "--json", sql)
	if r.Code == 0 || !strings.Contains(r.Stderr, "connection decoy: plugin duckdb offers no query.engine service") {
		t.Fatalf("query without query.connection, the first duckdb connection's binary offering no query.engine: exit %d, want a refusal naming decoy\n%s", r.Code, r.Stderr)
	}
	config(3000, true, decoy+fmt.Sprintf("  engine:\n    plugin: acmesql\n    path: %s\nquery: { connection: engine }\n", engine))
	equal("query through the engine query.connection names", e.QueryJSON(sql, false), 3000)

	config(3000, false, "")
	e.MustRun("sync", "--once")
	equal("query --as-of-lake after apply resumed", e.QueryJSON(sql, true), 3000)
	equal("query after apply resumed", e.QueryJSON(sql, false), 3000)
}

// copyExecutable copies a binary to a new path, executable.
func copyExecutable(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}
