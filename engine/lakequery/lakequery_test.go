package lakequery

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skippr-dev/skippr/engine/config"
	"github.com/skippr-dev/skippr/engine/connector"
	"github.com/skippr-dev/skippr/engine/pluginhost"
	"github.com/skippr-dev/skippr/internal/testplugins"
	"github.com/skippr-dev/skippr/plugin-sdk/client"
	sdk "github.com/skippr-dev/skippr/plugin-sdk/lakequery"
)

func TestMain(m *testing.M) { testplugins.Main(m) }

// failingStarter refuses every plugin, as a host does when a binary fails its checksum.
type failingStarter struct{}

func (failingStarter) Start(context.Context, pluginhost.Connection) (*client.Client, pluginhost.Binary, error) {
	return nil, pluginhost.Binary{}, errors.New("checksum mismatch")
}

// TestOpenErrors walks every way Open can fail before a query: each returns an error naming the cause (no
// panic: `skippr query` once dereferenced the nil Querier it returned), and no plugin it started outlives it.
func TestOpenErrors(t *testing.T) {
	testdest := testplugins.Build(t, "testdest")
	dir := t.TempDir()
	load := func(t *testing.T, pipelines string) *config.Config { return testConfig(t, testdest, dir, pipelines) }
	const onePipeline = `  p:
    source: gen
    destinations: [out]
    wal: { url: file:///tmp/unused-wal }
`
	for _, tc := range []struct {
		name      string
		pipelines string
		none      bool // select no pipeline
		host      connector.Starter
		want      string
		noLake    bool
	}{
		{name: "no pipeline selected", pipelines: onePipeline, none: true, want: "no lake to query", noLake: true},
		{name: "plugin refused at start", pipelines: onePipeline, host: failingStarter{}, want: "checksum mismatch"},
		{name: "destination offers no lake.plan", pipelines: onePipeline, want: "offers lake.plan", noLake: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := load(t, tc.pipelines)
			opts := Options{Config: cfg, Host: tc.host}
			if opts.Host == nil {
				opts.Host = &pluginhost.Host{LockPath: filepath.Join(t.TempDir(), "lock")}
			}
			if tc.none {
				opts.Pipelines = []*config.Pipeline{}
			}
			q, err := Open(context.Background(), opts)
			if err == nil {
				q.Close()
				t.Fatal("Open succeeded")
			}
			if q != nil {
				t.Errorf("Open returned a Querier beside its error")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
			if errors.Is(err, ErrNoLake) != tc.noLake {
				t.Errorf("errors.Is(%v, ErrNoLake) = %v, want %v", err, !tc.noLake, tc.noLake)
			}
			if pids := running(t, testdest); len(pids) > 0 {
				t.Errorf("testdest still running after Open failed: pids %v", pids)
			}
		})
	}
}

// testConfig loads a config of a datagen source that cannot start, a testdest destination writing to dir,
// and pipelines.
func testConfig(t *testing.T, testdest, dir, pipelines string) *config.Config {
	t.Helper()
	path := filepath.Join(t.TempDir(), "skippr.yaml")
	yaml := fmt.Sprintf(`connections:
  gen:
    plugin: datagen
    path: /nonexistent/datagen
    settings: { rows: 1 }
  out:
    plugin: testdest
    path: %s
    settings: { dir: %s }
pipelines:
%s`, testdest, dir, pipelines)
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestCompactErrors: `skippr lake compact` names the connection that is missing or offers no compaction
// (ErrNoService, a usage error), and leaves no plugin running.
func TestCompactErrors(t *testing.T) {
	testdest := testplugins.Build(t, "testdest")
	cfg := testConfig(t, testdest, t.TempDir(), `  p:
    source: gen
    destinations: [out]
    wal: { url: file:///tmp/unused-wal }
`)
	for _, tc := range []struct {
		name, conn string
		host       connector.Starter
		want       string
		noService  bool
	}{
		{name: "unknown connection", conn: "nope", want: `no connection "nope"`},
		{name: "connection offers no compaction", conn: "out", want: "does not offer lake.compact", noService: true},
		{name: "plugin refused at start", conn: "out", host: failingStarter{}, want: "checksum mismatch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			host := tc.host
			if host == nil {
				host = &pluginhost.Host{LockPath: filepath.Join(t.TempDir(), "lock")}
			}
			_, err := Compact(context.Background(), cfg, host, tc.conn, sdk.CompactRequest{Table: "events"})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v does not say %q", err, tc.want)
			}
			if errors.Is(err, ErrNoService) != tc.noService {
				t.Errorf("errors.Is(%v, ErrNoService) = %v, want %v", err, !tc.noService, tc.noService)
			}
			if pids := running(t, testdest); len(pids) > 0 {
				t.Errorf("testdest still running after Compact failed: pids %v", pids)
			}
		})
	}
}

// running lists the processes executing binary.
func running(t *testing.T, binary string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []string
	for _, e := range entries {
		if exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err == nil && exe == binary {
			pids = append(pids, e.Name())
		}
	}
	return pids
}

// TestQueryConnection: `query: {connection: NAME}` picks the query engine, whatever its plugin; without it the
// first duckdb connection, else duckdb itself.
func TestQueryConnection(t *testing.T) {
	for _, tc := range []struct {
		name, yaml       string
		wantConn, wantPl string
	}{
		{"named", "  mine: { plugin: sqlengine, path: /opt/sqlengine }\n  dk: { plugin: duckdb }\nquery: { connection: mine }\n", "mine", "sqlengine"},
		{"first duckdb", "  dk: { plugin: duckdb, version: \"~> 0.1\" }\n  mine: { plugin: sqlengine }\n", "dk", "duckdb"},
		{"made up", "  mine: { plugin: sqlengine }\n", "query", "duckdb"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.Parse("skippr.yml", []byte("connections:\n"+tc.yaml), func(string) (string, bool) { return "", false })
			if err != nil {
				t.Fatal(err)
			}
			cn, err := queryConnection(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if cn.Name != tc.wantConn || cn.Plugin != tc.wantPl {
				t.Errorf("query engine = connection %s (plugin %s), want %s (%s)", cn.Name, cn.Plugin, tc.wantConn, tc.wantPl)
			}
		})
	}
	cfg := &config.Config{Path: "x.yml", Query: config.QueryConfig{Connection: "gone"}}
	if _, err := queryConnection(cfg); err == nil || !strings.Contains(err.Error(), `no connection "gone"`) {
		t.Errorf("a query connection the config lacks: err = %v", err)
	}
}
