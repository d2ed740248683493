package harness

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/skippr-dev/skippr/internal/testplugins"
)

// DatagenToLake writes a config of one pipeline, datagen (settings gen) → the embedded lake, with WAL entries
// of up to maxBytes, and returns the lake's settings.
func (e *Env) DatagenToLake(gen, maxBytes string) string {
	lakeSettings := fmt.Sprintf(`{"catalog": {"warehouse": %q}, "namespace": "lake"}`, filepath.Join(e.Dir, "lake"))
	e.WriteDatagenLakeConfig(gen, lakeSettings, maxBytes)
	return lakeSettings
}

// WriteDatagenLakeConfig writes a config of one pipeline, datagen (settings gen) → iceberg (lakeSettings, one
// line of YAML flow or JSON), with a local WAL of entries of up to maxBytes, and the lake's apply limits if
// given (one line of YAML flow).
func (e *Env) WriteDatagenLakeConfig(gen, lakeSettings, maxBytes string, lakeApply ...string) {
	apply := ""
	if len(lakeApply) > 0 {
		apply = "\n    apply: " + lakeApply[0]
	}
	e.WriteConfig(fmt.Sprintf(`connections:
  gen:
    plugin: datagen
    version: "~> 0.1"
    settings: %s
  lake:
    plugin: iceberg
    version: "~> 0.1"
    settings: %s%s
pipelines:
  orders:
    source: gen
    destinations: [lake]
    wal:
      url: file://%s
      group_commit: { max_bytes: %s, max_delay: 100ms }
`, gen, lakeSettings, apply, filepath.Join(e.Dir, "wal"), maxBytes))
}

// LakeEqualsSource compares the lake table events with what datagen settings gen produce, row by row, and
// returns the row count.
func LakeEqualsSource(t *testing.T, lakeSettings, gen string) int {
	t.Helper()
	got := ScanLake(t, lakeSettings, "events")
	want := Want(t, gen)["events"]
	if len(got) != len(want) {
		t.Fatalf("lake has %d rows, source produced %d", len(got), len(want))
	}
	for k, w := range want {
		g := got[k]
		for col, v := range w {
			if !reflect.DeepEqual(NormalizeJSON(g[col]), NormalizeJSON(v)) {
				t.Fatalf("id %s column %s: lake %v, source %v", k, col, g[col], v)
			}
		}
	}
	return len(got)
}

// NormalizeJSON passes a value through JSON so numbers and nested values compare alike.
func NormalizeJSON(v any) any {
	b, _ := json.Marshal(v)
	var out any
	json.Unmarshal(b, &out)
	return out
}

// ScanLake reads a lake table (deletes applied) with the iceberg plugin binary itself, outside the engine,
// keyed by the id column's digits; a key held twice fails the test.
func ScanLake(t *testing.T, lakeSettings, stream string) map[string]map[string]any {
	t.Helper()
	return PluginRows(t, "iceberg", "scan", lakeSettings, stream, "the lake table", func(_ []byte, row map[string]any) string {
		return fmt.Sprint(row["id"]) // a json.Number: the digits as written
	})
}

// PluginRows runs a plugin binary's read-back subcommand (settings on stdin) for stream and returns its JSON
// lines keyed by key(line, row); numbers stay json.Numbers. A key held twice fails the test, naming what.
func PluginRows(t *testing.T, plugin, subcommand, settings, stream, what string, key func(line []byte, row map[string]any) string) map[string]map[string]any {
	t.Helper()
	return PluginRowsWith(t, nil, plugin, subcommand, settings, stream, what, key)
}

// PluginRowsWith is pluginRows with the command passed through wrap first (to run it in a network namespace).
func PluginRowsWith(t *testing.T, wrap func(*exec.Cmd) error, plugin, subcommand, settings, stream, what string, key func(line []byte, row map[string]any) string) map[string]map[string]any {
	t.Helper()
	cmd := exec.Command(testplugins.Build(t, plugin), subcommand, stream)
	if wrap != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := wrap(cmd); err != nil {
			t.Fatal(err)
		}
	}
	cmd.Stdin = strings.NewReader(settings)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s", subcommand, stream, err, errb.String())
	}
	got := map[string]map[string]any{}
	sc := bufio.NewScanner(&out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var row map[string]any
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.UseNumber()
		if err := dec.Decode(&row); err != nil {
			t.Fatalf("%s %s: %v: %s", subcommand, stream, err, sc.Text())
		}
		k := key(sc.Bytes(), row)
		if _, dup := got[k]; dup {
			t.Fatalf("%s %s holds key %s twice", what, stream, k)
		}
		got[k] = row
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}
