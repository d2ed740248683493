package e2e

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/test/harness"
)

// TestServeOneShotQuery: `skippr query` with a server named (--server, or query.server in the config) asks
// the running skippr serve instead of starting its plugins, and prints exactly what the plugin path prints,
// in every format, with the WAL's rows, --as-of-lake, and the same exit status and message for bad SQL. An
// unreachable server falls back to the plugins with a warning; a wrong token fails naming the setting.
func TestServeOneShotQuery(t *testing.T) {
	e := harness.NewEnvWith(t, "datagen", "iceberg", "duckdb")
	lakeSettings := fmt.Sprintf(`{"catalog": {"warehouse": %q}, "namespace": "lake"}`, filepath.Join(e.Dir, "lake"))
	config := func(rows int, paused bool, query string) {
		e.WriteConfig(fmt.Sprintf(`connections:
  gen:
    plugin: datagen
    version: "~> 0.1"
    settings: { seed: 5, rows: %d, batch_size: 200, update_ratio: 0.2, delete_ratio: 0.1 }
  lake:
    plugin: iceberg
    version: "~> 0.1"
    settings: %s
pipelines:
  orders:
    source: gen
    destinations: [lake]
    apply: { paused: %v }
    wal:
      url: file://%s
      group_commit: { max_bytes: 64KiB, max_delay: 50ms }
%s`, rows, lakeSettings, paused, filepath.Join(e.Dir, "wal"), query))
	}
	config(800, false, "")
	e.MustRun("sync", "--once") // the lake holds the first 800 events
	config(1100, true, "")
	e.MustRun("sync", "--once") // 300 more, only in the WAL

	const token = "nb-0123456789abcdef0123"
	e.ExtraEnv = append(e.ExtraEnv, "NB_TOKEN="+token)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	srv := startServe(t, ctx, e, "--token", "notebook=NB_TOKEN")
	addr, stop := srv.Addr, srv.Stop
	viaServer := []string{"query", "--server", addr}
	e.ExtraEnv = append(e.ExtraEnv, "SKIPPR_QUERY_TOKEN="+token)

	// The same bytes on stdout, format by format, with and without the WAL's rows.
	const lookup = `SELECT * FROM events WHERE id = 42`
	queries := []string{
		`SELECT id, seq, name, amount, ts FROM events ORDER BY id`,
		`SELECT count(*) AS n, sum(seq)::BIGINT AS s, min(name) AS first, max(amount) AS top FROM events`,
		lookup,
		`SELECT id, name FROM events WHERE false`,
	}
	for _, q := range queries {
		for _, args := range [][]string{{"--format", "table"}, {"--format", "csv"}, {"--json"}, {"--json", "--as-of-lake"}} {
			want := e.MustRun(append(append([]string{"query", "--no-server"}, args...), q)...)
			got := e.MustRun(append(append(slices.Clone(viaServer), args...), q)...)
			if got.Stdout != want.Stdout {
				t.Fatalf("%s %v\nthrough the server:\n%s\nwith the plugins:\n%s", q, args, got.Stdout, want.Stdout)
			}
			if strings.Contains(got.Stderr, "starting the plugins") {
				t.Fatalf("%s %v: the server was not used:\n%s", q, args, got.Stderr)
			}
		}
	}
	if got := e.MustRun(append(slices.Clone(viaServer), "--json", `SELECT count(*) AS n FROM events`)...); !strings.Contains(got.Stdout, `"n":`) || got.Stdout == `{"n":0}`+"\n" {
		t.Fatalf("count through the server: %q", got.Stdout)
	}
	// Bad SQL: exit status 2 and the engine's message, as with the plugins.
	bad := `SELECT nope FROM events`
	want, got := e.Run("query", "--no-server", bad), e.Run(append(slices.Clone(viaServer), bad)...)
	if want.Code != 2 || got.Code != 2 || got.Stderr != want.Stderr {
		t.Fatalf("bad SQL: through the server exit %d, stderr:\n%s\nwith the plugins exit %d, stderr:\n%s", got.Code, got.Stderr, want.Code, want.Stderr)
	}

	// The config names the server (and its token from the environment): plain `skippr query` uses it.
	config(1100, true, "query: { server: "+addr+", server_token: ${NB_TOKEN} }\n")
	e.ExtraEnv = slices.DeleteFunc(e.ExtraEnv, func(s string) bool { return strings.HasPrefix(s, "SKIPPR_QUERY_TOKEN=") })
	var times []time.Duration
	for i := 0; i < 7; i++ {
		start := time.Now()
		r := e.MustRun("query", "--json", lookup)
		times = append(times, time.Since(start))
		if strings.Contains(r.Stderr, "starting the plugins") {
			t.Fatalf("query.server in the config was not used:\n%s", r.Stderr)
		}
	}
	start := time.Now()
	e.MustRun("query", "--no-server", "--json", lookup)
	local := time.Since(start)
	slices.Sort(times)
	t.Logf("point lookup, the whole skippr query command: through skippr serve median %s (of 7, min %s), starting the plugins %s",
		times[3].Round(time.Millisecond), times[0].Round(time.Millisecond), local.Round(time.Millisecond))

	// A wrong token: exit 1, naming the setting.
	e.ExtraEnv = append(e.ExtraEnv, "SKIPPR_QUERY_TOKEN=wrong-token-0123456789")
	if r := e.Run("query", lookup); r.Code != 1 || !strings.Contains(r.Stderr, "server_token") {
		t.Fatalf("wrong token: exit %d, stderr:\n%s", r.Code, r.Stderr)
	}
	e.ExtraEnv = e.ExtraEnv[:len(e.ExtraEnv)-1]

	// Unreachable: a warning, then the plugins' answer.
	want = e.MustRun("query", "--no-server", "--json", queries[0])
	stop()
	got = e.MustRun("query", "--json", queries[0])
	if got.Stdout != want.Stdout || !strings.Contains(got.Stderr, "query server unreachable") || !strings.Contains(got.Stderr, "starting the plugins instead") {
		t.Fatalf("server stopped: stderr:\n%s\nsame answer: %v", got.Stderr, got.Stdout == want.Stdout)
	}
	// Nothing listens at all (a port just freed): the same.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	free := l.Addr().String()
	l.Close()
	if got := e.MustRun("query", "--server", free, "--json", queries[0]); got.Stdout != want.Stdout || !strings.Contains(got.Stderr, free) {
		t.Fatalf("no server at %s: stderr:\n%s", free, got.Stderr)
	}
}
