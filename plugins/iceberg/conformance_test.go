package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/conformance"
	"github.com/skippr-dev/skippr/plugin-sdk/lakequery"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"

	"github.com/skippr-dev/skippr/plugins/iceberg/dest"
)

// The conformance kit's checks, then compaction through the protocol on the same binary (linking it is most
// of the time).
func TestConformance(t *testing.T) {
	bin := conformance.Build(t, ".")
	settings, err := json.Marshal(map[string]any{"catalog": map[string]any{"warehouse": filepath.Join(t.TempDir(), "wh")}})
	if err != nil {
		t.Fatal(err)
	}
	conformance.Run(t, conformance.Config{Binary: bin, Settings: settings, BadSettings: []byte(`{"catalog": {"type": "sql"}}`)})
	t.Run("compact-service", func(t *testing.T) { testCompactService(t, bin) })
}

// The lake.compact service rewrites the table and reports what it did.
func testCompactService(t *testing.T, bin string) {
	settings, err := json.Marshal(map[string]any{"catalog": map[string]any{"warehouse": filepath.Join(t.TempDir(), "wh")}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sc := change.Schema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "v", Type: arrow.BinaryTypes.String, Nullable: true}}, []string{"id"})
	d := serve.NewSessions(&dest.Destination{})
	defer d.Close()
	for seq, op := range []change.Op{change.OpInsert, change.OpUpdate, change.OpUpdate} {
		b := change.NewBuilder(memory.DefaultAllocator, sc)
		for id := int64(1); id <= 3; id++ {
			b.Field(0).(*array.Int64Builder).Append(id)
			b.Field(1).(*array.StringBuilder).Append(op.String())
			b.Row(op, "")
		}
		rec := b.NewBatch()
		b.Release()
		_, err := d.Apply(ctx, serve.ApplyRequest{Settings: settings, Pipeline: "p", Sequence: uint64(seq + 1), Items: []serve.Item{{Stream: "s", Record: rec}}})
		rec.Release()
		if err != nil {
			t.Fatal(err)
		}
	}
	c := conformance.Start(t, bin, nil)
	out, err := c.LakeCompact(ctx, settings, lakequery.CompactRequest{Table: "s", ExpireOlderThan: time.Nanosecond, RetainLast: 1})
	if err != nil {
		t.Fatalf("compact: %v", err)
	}
	var res dest.CompactResult
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("compact output %q: %v", out, err)
	}
	if res.Table != "skippr.s" || res.RemovedDataFiles != 3 || res.AddedDataFiles != 1 || res.RemovedEqualityDeleteFiles != 2 || res.SnapshotsAfter != 1 {
		t.Fatalf("compact result %+v", res)
	}
	if _, err := c.LakeCompact(ctx, settings, lakequery.CompactRequest{Table: "nope"}); err == nil {
		t.Fatalf("compact of a table that does not exist: no error")
	}
}
