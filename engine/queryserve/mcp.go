package queryserve

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/skippr-dev/skippr/engine/lakequery"
)

// MCP: the same tables for agents, as Model Context Protocol tools over the same statements (and so the same
// limits, read-only guard and freshness): list_tables, describe_table, and query with a row limit. Rows come
// as JSON objects (an agent reads text, so here values are converted one by one; Flight SQL is the path
// without conversion).

// MaxMCPRows bounds a query tool call's rows whatever the caller asks.
const MaxMCPRows = 10000

// Column is one column of a table or result.
type Column struct {
	Name string `json:"name"`
	Type string `json:"type" jsonschema:"the Arrow type"`
}

// TableInfo is one queryable table.
type TableInfo struct {
	Name    string   `json:"name" jsonschema:"schema.table, as SQL names it"`
	Columns []Column `json:"columns,omitempty"`
	// Freshness is set by list_tables when the querier reports it (*lakequery.Querier does).
	Freshness *Freshness `json:"freshness,omitempty"`
}

// Freshness is how current a table's answers are: the lake's snapshot, and the WAL's rows not applied to it
// yet (which the answers include, unless as_of_lake).
type Freshness struct {
	LakeSnapshotID   int64  `json:"lake_snapshot_id,omitempty"`
	LakeSnapshotTime string `json:"lake_snapshot_time,omitempty" jsonschema:"when the lake's current snapshot was committed (RFC 3339); absent: no snapshot yet"`
	WALEntries       int    `json:"wal_entries" jsonschema:"committed write-ahead log entries with rows of this table not yet applied to the lake"`
	WALRows          int64  `json:"wal_rows" jsonschema:"rows in those entries"`
	WALOldestCommit  string `json:"wal_oldest_commit_time,omitempty" jsonschema:"commit time of the oldest of those entries (RFC 3339): the lake lags by at least this much"`
}

// freshnessReporter is a Querier that reports each table's freshness.
type freshnessReporter interface {
	Freshness(ctx context.Context) ([]lakequery.TableFreshness, error)
}

// freshness is each table's freshness by schema.table; nil when the querier does not report it.
func (s *Server) freshness(ctx context.Context) (map[string]*Freshness, error) {
	fr, ok := s.opts.Querier.(freshnessReporter)
	if !ok {
		return nil, nil
	}
	ts, err := fr.Freshness(ctx)
	if err != nil {
		return nil, fmt.Errorf("table freshness: %w", err)
	}
	stamp := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format(time.RFC3339Nano)
	}
	out := map[string]*Freshness{}
	for _, t := range ts {
		if out[t.Name] == nil { // the first lake of a name is the one the engine reads
			out[t.Name] = &Freshness{LakeSnapshotID: t.SnapshotID, LakeSnapshotTime: stamp(t.SnapshotTime),
				WALEntries: t.WALEntries, WALRows: t.WALRows, WALOldestCommit: stamp(t.WALOldest)}
		}
	}
	return out, nil
}

type listTablesIn struct{}

type listTablesOut struct {
	Tables []TableInfo `json:"tables"`
}

type describeIn struct {
	Table string `json:"table" jsonschema:"schema.table (or a bare table name)"`
}

type queryIn struct {
	SQL      string `json:"sql" jsonschema:"one read-only statement in DuckDB's SQL dialect"`
	MaxRows  int    `json:"max_rows,omitempty" jsonschema:"rows to return at most (default 100, at most 10000)"`
	AsOfLake bool   `json:"as_of_lake,omitempty" jsonschema:"answer from the lake alone, without the rows still in the write-ahead log"`
	// IncludeDeleted shows the rows a soft-deleting destination flagged deleted (_skippr_deleted), hidden by default.
	IncludeDeleted bool `json:"include_deleted,omitempty" jsonschema:"show rows flagged deleted (_skippr_deleted) by a soft-deleting destination, hidden by default"`
}

type queryOut struct {
	Columns   []Column         `json:"columns"`
	Rows      []map[string]any `json:"rows"`
	Truncated bool             `json:"truncated" jsonschema:"true when the statement had more rows than max_rows"`
}

// MCPServer is the MCP server of s's tools.
func (s *Server) MCPServer() *mcp.Server {
	m := mcp.NewServer(&mcp.Implementation{Name: "skippr", Version: s.opts.Version}, nil)
	readOnly := &mcp.ToolAnnotations{ReadOnlyHint: true}
	mcp.AddTool(m, &mcp.Tool{Name: "list_tables", Annotations: readOnly,
		Description: "List the tables of the lake (Iceberg, merged with the rows still in skippr's write-ahead log) with their columns " +
			"and freshness: the lake snapshot's commit time and the write-ahead log's entries and rows not yet applied to the lake."},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ listTablesIn) (*mcp.CallToolResult, listTablesOut, error) {
			ts, err := s.tables(ctx, nil, nil, nil)
			if err != nil {
				return nil, listTablesOut{}, err
			}
			fresh, err := s.freshness(ctx)
			if err != nil {
				return nil, listTablesOut{}, err
			}
			out := listTablesOut{Tables: []TableInfo{}}
			for _, t := range ts {
				info, err := s.describe(ctx, t)
				if err != nil {
					return nil, listTablesOut{}, err
				}
				info.Freshness = fresh[info.Name]
				out.Tables = append(out.Tables, info)
			}
			return nil, out, nil
		})
	mcp.AddTool(m, &mcp.Tool{Name: "describe_table", Annotations: readOnly,
		Description: "The columns of one table and their Arrow types."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in describeIn) (*mcp.CallToolResult, TableInfo, error) {
			schema, table, found := strings.Cut(in.Table, ".")
			if !found {
				schema, table = "%", in.Table
			}
			ts, err := s.tables(ctx, nil, &schema, &table)
			if err != nil {
				return nil, TableInfo{}, err
			}
			if len(ts) == 0 {
				return nil, TableInfo{}, fmt.Errorf("no table %q: list_tables names them", in.Table)
			}
			info, err := s.describe(ctx, ts[0])
			return nil, info, err
		})
	mcp.AddTool(m, &mcp.Tool{Name: "query", Annotations: readOnly,
		Description: "Run one read-only SQL statement (DuckDB dialect) over the lake plus the rows still in the write-ahead log; " +
			"returns at most max_rows rows as JSON objects; as_of_lake answers from the lake alone; include_deleted shows soft-deleted rows. The server's time and memory limits apply."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in queryIn) (*mcp.CallToolResult, queryOut, error) {
			out, err := s.rows(ctx, withDirective(in.SQL, directives{asOfLake: in.AsOfLake, includeDeleted: in.IncludeDeleted}), in.MaxRows)
			return nil, out, err
		})
	return m
}

// describe is a table's name and columns.
func (s *Server) describe(ctx context.Context, t tableRef) (TableInfo, error) {
	sc, err := s.schemaOf(ctx, t)
	if err != nil {
		return TableInfo{}, err
	}
	return TableInfo{Name: t.schema + "." + t.table, Columns: columns(sc)}, nil
}

func columns(sc *arrow.Schema) []Column {
	out := []Column{}
	for _, f := range sc.Fields() {
		out = append(out, Column{Name: f.Name, Type: f.Type.String()})
	}
	return out
}

// rows runs sql and returns its first max rows; the statement is stopped once they are read.
func (s *Server) rows(ctx context.Context, sql string, max int) (queryOut, error) {
	if max <= 0 {
		max = 100
	}
	max = min(max, MaxMCPRows)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // stops the engine when the statement has more rows than asked
	sc, ch, err := s.query(ctx, sql)
	if err != nil {
		return queryOut{}, err
	}
	out := queryOut{Columns: columns(sc), Rows: []map[string]any{}}
	var failed error
	for c := range ch {
		if c.Err != nil {
			failed = c.Err
			continue
		}
		rec := c.Data
		for i := 0; i < int(rec.NumRows()); i++ {
			if len(out.Rows) == max {
				out.Truncated = true
				cancel()
				break
			}
			row := make(map[string]any, rec.NumCols())
			for j := 0; j < int(rec.NumCols()); j++ {
				row[rec.ColumnName(j)] = rec.Column(j).GetOneForMarshal(i)
			}
			out.Rows = append(out.Rows, row)
		}
		rec.Release()
	}
	if failed != nil && !out.Truncated {
		return queryOut{}, failed
	}
	return out, nil
}

// MCPHandler serves the MCP tools over streamable HTTP, with the same bearer tokens as Flight SQL.
func (s *Server) MCPHandler(tokens []Token) (http.Handler, error) {
	a, err := newAuth(tokens, s.log)
	if err != nil {
		return nil, err
	}
	m := s.MCPServer()
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return m }, nil)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		client, ok := a.verify(r.Header.Values("Authorization"))
		if !ok {
			a.log.Info("refused an MCP request without a known token", "path", r.URL.Path)
			http.Error(w, "skippr serve: a bearer token is required (Authorization: Bearer <token>) and this one is missing or not known", http.StatusUnauthorized)
			return
		}
		if client == "" && r.TLS != nil {
			client = certName(*r.TLS)
		}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), clientKey{}, client)))
	}), nil
}
