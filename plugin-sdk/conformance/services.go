package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/client"
	"github.com/skippr-dev/skippr/plugin-sdk/lakequery"
	pluginv2 "github.com/skippr-dev/skippr/plugin-sdk/proto/skippr/plugin/v2"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
)

// checkServices exercises the optional services the plugin's spec names, each as a subtest.
func checkServices(ctx context.Context, t *testing.T, c *client.Client, spec *pluginv2.SpecResponse, cfg Config) {
	for _, s := range spec.GetServices() {
		switch s {
		case lakequery.ServicePlan:
			t.Run("lake-plan", func(t *testing.T) { checkLakePlan(ctx, t, c, cfg) })
		case lakequery.ServiceCompact:
			t.Run("lake-compact", func(t *testing.T) { checkLakeCompact(ctx, t, c, cfg) })
		case lakequery.ServiceQuery:
			t.Run("query-engine", func(t *testing.T) { checkQuery(ctx, t, c) })
		case lakequery.ServiceWALCache:
			t.Run("query-wal-cache", func(t *testing.T) { checkWALCache(ctx, t, c) })
		case protocol.ServiceResnapshot:
			// What a re-snapshot copies depends on the source's database; here only that a source announces it.
			if k := spec.GetKind(); k != pluginv2.Kind_KIND_SOURCE && k != pluginv2.Kind_KIND_BOTH {
				t.Errorf("spec names service %s, but the plugin is no source (kind %s)", s, k)
			}
		default:
			t.Errorf("spec names unknown service %q (known: %s, %s, %s, %s, %s)", s, lakequery.ServicePlan, lakequery.ServiceCompact, lakequery.ServiceQuery, lakequery.ServiceWALCache, protocol.ServiceResnapshot)
		}
	}
}

// applySample applies one entry of three rows of stream "conformance" for a new pipeline and returns the
// pipeline's name.
func applySample(ctx context.Context, t *testing.T, c *client.Client, cfg Config) string {
	t.Helper()
	pipeline := fmt.Sprintf("conformance-svc-%d", time.Now().UnixNano())
	st, b := sampleBatch(t, []change.Op{change.OpInsert, change.OpInsert, change.OpInsert}, []int64{1, 2, 3})
	if _, err := c.Apply(ctx, cfg.Settings, pipeline, 1, []client.ApplyItem{{Schema: st}, {Batch: &b}}); err != nil {
		t.Fatalf("apply: %v", err)
	}
	return pipeline
}

// A lake planner plans the table an apply wrote, with the pipeline's fence, and an unknown stream as absent.
func checkLakePlan(ctx context.Context, t *testing.T, c *client.Client, cfg Config) {
	pipeline := applySample(ctx, t, c, cfg)
	plan, err := c.LakePlan(ctx, cfg.Settings, lakequery.PlanRequest{Pipeline: pipeline, Streams: []string{"conformance", "conformance_absent"}, FetchDir: t.TempDir()})
	if err != nil {
		t.Fatalf("plan: %v", err)
	}
	var found, absent bool
	for _, tp := range plan.Tables {
		switch tp.Stream {
		case "conformance":
			found = true
			if !tp.Exists || tp.Fence != 1 || len(tp.Files) == 0 || len(tp.ArrowSchema) == 0 {
				t.Errorf("plan of the applied stream: exists %v, fence %d (want 1), %d files, schema %d bytes", tp.Exists, tp.Fence, len(tp.Files), len(tp.ArrowSchema))
			}
		case "conformance_absent":
			absent = true
			if tp.Exists {
				t.Errorf("plan of a stream never applied: exists")
			}
		}
	}
	if !found || !absent {
		t.Errorf("plan names the applied stream: %v, the absent one: %v (tables %d)", found, absent, len(plan.Tables))
	}
}

// A lake compactor maintains the table an apply wrote and reports in JSON.
func checkLakeCompact(ctx context.Context, t *testing.T, c *client.Client, cfg Config) {
	applySample(ctx, t, c, cfg)
	report, err := c.LakeCompact(ctx, cfg.Settings, lakequery.CompactRequest{Table: "conformance"})
	if err != nil {
		t.Fatalf("compact: %v", err)
	}
	if !json.Valid(report) {
		t.Errorf("compact report is not JSON: %q", report)
	}
}

// A query engine answers SQL without lakes, and reports an error in the SQL as lakequery.ErrSQL.
func checkQuery(ctx context.Context, t *testing.T, c *client.Client) {
	ask := func(sql string) (string, error) {
		var out bytes.Buffer
		_, err := c.Query(ctx, func(w io.Writer) error {
			_, err := lakequery.NewWriter(w, lakequery.Request{SQL: sql, Format: lakequery.FormatCSV})
			return err
		}, &out)
		return out.String(), err
	}
	out, err := ask("SELECT 42 AS answer")
	if err != nil {
		t.Fatalf("query: %v", err)
	}
	if !strings.Contains(out, "answer") || !strings.Contains(out, "42") {
		t.Errorf("query SELECT 42 AS answer (csv): got %q", out)
	}
	if _, err := ask("SELEKT nothing"); !errors.Is(err, lakequery.ErrSQL) {
		t.Errorf("query with bad SQL: got %v, want an error wrapping lakequery.ErrSQL", err)
	}
}

// A query engine keeping the WAL between queries answers a stream that holds every entry of a new log, and
// refuses one that builds on entries it never received with lakequery.ErrStale (the server then sends again).
func checkWALCache(ctx context.Context, t *testing.T, c *client.Client) {
	log := fmt.Sprintf("conformance-%d", time.Now().UnixNano())
	ask := func(ws lakequery.WALState) error {
		var out bytes.Buffer
		_, err := c.Query(ctx, func(w io.Writer) error {
			_, err := lakequery.NewWriter(w, lakequery.Request{SQL: "SELECT 42 AS answer", Format: lakequery.FormatCSV, WAL: []lakequery.WALState{ws}})
			return err
		}, &out)
		return err
	}
	if err := ask(lakequery.WALState{Pipeline: "conformance", Log: log, Through: 0}); err != nil {
		t.Fatalf("query with a new log and no entries: %v", err)
	}
	if err := ask(lakequery.WALState{Pipeline: "conformance", Log: log + "-other", Base: 7, Through: 7}); !errors.Is(err, lakequery.ErrStale) {
		t.Errorf("query building on entries 1-7 of a log never sent: got %v, want an error wrapping lakequery.ErrStale", err)
	}
}
