package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"reflect"
	"regexp"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/skippr-dev/skippr/test/harness"
)

// bearer adds a token to every request.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// callTool calls a tool and decodes its structured result into out; a tool error fails unless wantErr.
func callTool(t *testing.T, ctx context.Context, s *mcp.ClientSession, name string, args map[string]any, out any) *mcp.CallToolResult {
	t.Helper()
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if out != nil && !res.IsError {
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: %v in %s", name, err, b)
		}
	}
	return res
}

// TestServeMCP: the MCP tools of skippr serve, for a local agent over stdio and over streamable HTTP with a
// token: the table list with columns and freshness (the lake snapshot's time, the WAL's unapplied entries and
// rows, none once applied), a table's description, a query's rows (as skippr query has them, the
// WAL's rows included) cut at max_rows, the lake alone with as_of_lake, and a write refused.
func TestServeMCP(t *testing.T) {
	e := harness.NewEnvWith(t, "datagen", "iceberg", "duckdb")
	lakeSettings := fmt.Sprintf(`{"catalog": {"warehouse": %q}, "namespace": "lake"}`, filepath.Join(e.Dir, "lake"))
	config := func(rows int, paused bool) {
		e.WriteConfig(fmt.Sprintf(`connections:
  gen:
    plugin: datagen
    version: "~> 0.1"
    settings: { seed: 4, rows: %d, batch_size: 200, update_ratio: 0.2, delete_ratio: 0.1 }
  lake:
    plugin: iceberg
    version: "~> 0.1"
    settings: %s
pipelines:
  orders:
    source: gen
    destinations: [lake]
    apply: { paused: %v }
    wal: { url: "file://%s" }
`, rows, lakeSettings, paused, filepath.Join(e.Dir, "wal")))
	}
	begin := time.Now().Add(-time.Second) // commit times are later (second-rounded at worst)
	config(600, false)
	e.MustRun("sync", "--once")
	config(800, true)
	e.MustRun("sync", "--once")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	type freshness struct {
		LakeSnapshotID   int64  `json:"lake_snapshot_id"`
		LakeSnapshotTime string `json:"lake_snapshot_time"`
		WALEntries       int    `json:"wal_entries"`
		WALRows          int64  `json:"wal_rows"`
		WALOldestCommit  string `json:"wal_oldest_commit_time"`
	}
	// listTables calls list_tables, checks the one table and its columns, and returns its freshness.
	listTables := func(t *testing.T, s *mcp.ClientSession) freshness {
		var tables struct {
			Tables []struct {
				Name      string
				Columns   []struct{ Name, Type string }
				Freshness *freshness
			}
		}
		callTool(t, ctx, s, "list_tables", nil, &tables)
		if len(tables.Tables) != 1 || tables.Tables[0].Name != "lake.events" || len(tables.Tables[0].Columns) != 5 || tables.Tables[0].Columns[0].Name != "id" || tables.Tables[0].Freshness == nil {
			t.Fatalf("list_tables: %+v", tables)
		}
		return *tables.Tables[0].Freshness
	}
	// within: an RFC 3339 time of the test's run.
	within := func(t *testing.T, what, stamp string) time.Time {
		t.Helper()
		ts, err := time.Parse(time.RFC3339Nano, stamp)
		if err != nil || ts.Before(begin) || ts.After(time.Now()) {
			t.Fatalf("%s %q (%v): not between the test's start %s and now", what, stamp, err, begin.UTC())
		}
		return ts
	}
	var lakeTime time.Time // the lake snapshot's commit time, with apply paused

	check := func(t *testing.T, s *mcp.ClientSession) {
		// Freshness with apply paused: the lake's snapshot from the first sync, the second sync's rows in the WAL.
		f := listTables(t, s)
		lakeTime = within(t, "lake_snapshot_time", f.LakeSnapshotTime)
		if oldest := within(t, "wal_oldest_commit_time", f.WALOldestCommit); f.LakeSnapshotID == 0 || f.WALEntries == 0 || f.WALRows == 0 || oldest.Before(lakeTime) {
			t.Fatalf("list_tables freshness with apply paused: %+v", f)
		}
		var desc struct{ Name string }
		callTool(t, ctx, s, "describe_table", map[string]any{"table": "events"}, &desc)
		if desc.Name != "lake.events" {
			t.Fatalf("describe_table events: %+v", desc)
		}
		const q = `SELECT id, seq, name FROM events ORDER BY id`
		want := e.QueryJSON(q, false)
		var got struct {
			Rows      []any
			Truncated bool
		}
		callTool(t, ctx, s, "query", map[string]any{"sql": q, "max_rows": 7}, &got)
		if !got.Truncated || !reflect.DeepEqual(got.Rows, want[:7]) {
			t.Fatalf("query, 7 rows: %+v\nskippr query: %s", got, harness.Show(want[:7]))
		}
		got.Truncated, got.Rows = false, nil
		callTool(t, ctx, s, "query", map[string]any{"sql": q, "max_rows": 10000}, &got)
		if got.Truncated || !reflect.DeepEqual(got.Rows, want) {
			t.Fatalf("query, all rows: %d rows (truncated %v), skippr query %d", len(got.Rows), got.Truncated, len(want))
		}
		// as_of_lake: the lake alone, as skippr query --as-of-lake (apply is paused: the WAL holds rows).
		lakeWant := e.QueryJSON(q, true)
		got.Rows = nil
		callTool(t, ctx, s, "query", map[string]any{"sql": q, "max_rows": 10000, "as_of_lake": true}, &got)
		if len(lakeWant) == len(want) || !reflect.DeepEqual(got.Rows, lakeWant) {
			t.Fatalf("query as_of_lake: %d rows, skippr query --as-of-lake %d, with the WAL %d", len(got.Rows), len(lakeWant), len(want))
		}
		if res := callTool(t, ctx, s, "query", map[string]any{"sql": "COPY events TO '" + filepath.Join(e.Dir, "x.csv") + "'"}, nil); !res.IsError {
			t.Fatalf("COPY through MCP was not refused: %+v", res)
		}
	}

	t.Run("stdio", func(t *testing.T) {
		cl := mcp.NewClient(&mcp.Implementation{Name: "skippr-test"}, nil)
		s, err := cl.Connect(ctx, &mcp.CommandTransport{Command: e.Cmd(ctx, "serve", "--mcp-stdio")}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		check(t, s)
	})

	t.Run("http", func(t *testing.T) {
		const token = "mcp-0123456789abcdef0123"
		e.ExtraEnv = append(e.ExtraEnv, "AGENT_TOKEN="+token)
		stderr := startServe(t, ctx, e, "--mcp-addr", "127.0.0.1:0", "--token", "agent=AGENT_TOKEN").Stderr
		// The MCP listener is up before the Flight SQL one, whose line startServe waited for.
		m := regexp.MustCompile(`msg="serving MCP" mcp_addr=(\S+)`).FindStringSubmatch(stderr.String())
		if m == nil {
			t.Fatalf("no MCP address in the log:\n%s", stderr.String())
		}
		addr := m[1]
		endpoint := "http://" + addr + "/mcp"
		cl := mcp.NewClient(&mcp.Implementation{Name: "skippr-test"}, nil)
		if s, err := cl.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, MaxRetries: -1}, nil); err == nil {
			s.Close()
			t.Fatal("an MCP client without a token connected")
		}
		if s, err := cl.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, MaxRetries: -1,
			HTTPClient: &http.Client{Transport: bearer{"wrong-0123456789abcdef"}}}, nil); err == nil {
			s.Close()
			t.Fatal("an MCP client with a wrong token connected")
		}
		s, err := cl.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &http.Client{Transport: bearer{token}}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		check(t, s)
	})

	// Applied: the WAL holds nothing for the table beyond the lake, whose snapshot is newer.
	config(800, false)
	e.MustRun("sync", "--once")
	cl := mcp.NewClient(&mcp.Implementation{Name: "skippr-test"}, nil)
	s, err := cl.Connect(ctx, &mcp.CommandTransport{Command: e.Cmd(ctx, "serve", "--mcp-stdio")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	f := listTables(t, s)
	if newer := within(t, "lake_snapshot_time", f.LakeSnapshotTime); f.WALEntries != 0 || f.WALRows != 0 || f.WALOldestCommit != "" || newer.Before(lakeTime) {
		t.Fatalf("list_tables freshness after apply: %+v (with apply paused the lake's snapshot was of %s)", f, lakeTime)
	}
}
