package connector

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/engine/config"
	"github.com/skippr-dev/skippr/engine/pipeline"
	"github.com/skippr-dev/skippr/plugin-sdk/client"
	pluginv2 "github.com/skippr-dev/skippr/plugin-sdk/proto/skippr/plugin/v2"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
)

func TestKind(t *testing.T) {
	for _, tc := range []struct {
		wire      pluginv2.Kind
		src, dest bool
	}{
		{pluginv2.Kind_KIND_UNSPECIFIED, false, false},
		{pluginv2.Kind_KIND_SOURCE, true, false},
		{pluginv2.Kind_KIND_DESTINATION, false, true},
		{pluginv2.Kind_KIND_BOTH, true, true},
	} {
		s := Spec{Kind: kindOf(tc.wire)}
		if s.Is(KindSource) != tc.src || s.Is(KindDestination) != tc.dest {
			t.Errorf("%v: source %v destination %v, want %v %v", tc.wire, s.Is(KindSource), s.Is(KindDestination), tc.src, tc.dest)
		}
	}
}

func TestModeNames(t *testing.T) {
	for wire, want := range map[pluginv2.SyncMode]string{
		pluginv2.SyncMode_SYNC_MODE_UNSPECIFIED: "unspecified",
		pluginv2.SyncMode_SYNC_MODE_SNAPSHOT:    "snapshot",
		pluginv2.SyncMode_SYNC_MODE_CDC:         "cdc",
		pluginv2.SyncMode_SYNC_MODE_APPEND_ONLY: "append_only",
	} {
		if got := modeOf(wire).String(); got != want {
			t.Errorf("%v: %q, want %q", wire, got, want)
		}
	}
}

func TestCapabilitiesOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		wire *pluginv2.CapabilitiesResponse
		want Capabilities
	}{
		{"none", &pluginv2.CapabilitiesResponse{}, Capabilities{}},
		{"all", &pluginv2.CapabilitiesResponse{ExactlyOnce: true, Deletes: true, SchemaEvolution: true, Truncate: true,
			Coalesce: true, Resnapshot: true, UnsupportedTypes: []string{"decimal256"},
			ApplyDefaults: &pluginv2.ApplyDefaults{MaxIntervalMs: 1500, MaxBytes: 10, MaxEntries: 3}},
			Capabilities{ExactlyOnce: true, Deletes: true, SchemaEvolution: true, Truncate: true, Coalesce: true, Resnapshot: true,
				UnsupportedTypes: []string{"decimal256"}, ApplyDefaults: &ApplyDefaults{MaxInterval: 1500 * time.Millisecond, MaxBytes: 10, MaxEntries: 3}}},
		{"not exactly once", &pluginv2.CapabilitiesResponse{ExactlyOnceNote: "no transactions"}, Capabilities{ExactlyOnceNote: "no transactions"}},
	} {
		if got := capabilitiesOf(tc.wire); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// TestMessageOf: each message of a Read reaches the commit loop with every field the loop reads.
func TestMessageOf(t *testing.T) {
	labels := map[string]string{"table": "public.a"}
	for _, tc := range []struct {
		name string
		wire client.Message
		want pipeline.Message
	}{
		{"batch", client.Message{Batch: &protocol.Batch{Stream: "s", SchemaID: "v1", Rows: 3, IPC: []byte("ipc")}},
			pipeline.Message{Batch: &pipeline.Batch{Stream: "s", Rows: 3, IPC: []byte("ipc")}}},
		{"schema", client.Message{Schema: &pluginv2.Stream{Name: "s", ArrowSchema: []byte("sch"), PrimaryKey: []string{"id"}}},
			pipeline.Message{Schema: &pipeline.Schema{Stream: "s", ArrowSchema: []byte("sch")}}},
		{"checkpoint", client.Message{Checkpoint: &pluginv2.Checkpoint{Position: []byte("lsn"), RowsDone: 5, RowsTotal: 9, LagMs: 1500, Idle: true,
			Metrics: []*pluginv2.Metric{{Name: "resnapshot_rows", Value: 5, Labels: labels, Help: "rows"}}}},
			pipeline.Message{Checkpoint: &pipeline.SourceCheckpoint{Position: []byte("lsn"), RowsDone: 5, RowsTotal: 9, Lag: 1500 * time.Millisecond, Idle: true,
				Metrics: []pipeline.SourceMetric{{Name: "resnapshot_rows", Value: 5, Labels: labels, Help: "rows"}}}}},
		{"empty checkpoint", client.Message{Checkpoint: &pluginv2.Checkpoint{}}, pipeline.Message{Checkpoint: &pipeline.SourceCheckpoint{}}},
		{"truncate", client.Message{Truncate: "s"}, pipeline.Message{Truncate: "s"}},
		{"resnapshot begin", client.Message{Resnapshot: &pluginv2.ResnapshotMark{Stream: "s"}},
			pipeline.Message{Resnapshot: &pipeline.ResnapshotMark{Stream: "s"}}},
		{"resnapshot end", client.Message{Resnapshot: &pluginv2.ResnapshotMark{Stream: "s", End: true}},
			pipeline.Message{Resnapshot: &pipeline.ResnapshotMark{Stream: "s", End: true}}},
	} {
		if got := messageOf(tc.wire); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %s, want %s", tc.name, show(got), show(tc.want))
		}
	}
}

// show prints what m's pointers point at, so a failure says which field differs.
func show(m pipeline.Message) string {
	switch {
	case m.Batch != nil:
		return fmt.Sprintf("batch %+v", *m.Batch)
	case m.Schema != nil:
		return fmt.Sprintf("schema %+v", *m.Schema)
	case m.Checkpoint != nil:
		return fmt.Sprintf("checkpoint %+v", *m.Checkpoint)
	case m.Resnapshot != nil:
		return fmt.Sprintf("resnapshot %+v", *m.Resnapshot)
	}
	return fmt.Sprintf("%+v", m)
}

// TestApplyItemOf: each item of an apply reaches the plugin as the client sends it.
func TestApplyItemOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		item pipeline.ApplyItem
		want client.ApplyItem
	}{
		{"entry mark", pipeline.ApplyItem{Entry: 7}, client.ApplyItem{Entry: 7}},
		{"batch", pipeline.ApplyItem{Batch: &pipeline.Batch{Stream: "s", Rows: 3, IPC: []byte("ipc")}},
			client.ApplyItem{Batch: &protocol.Batch{Stream: "s", Rows: 3, IPC: []byte("ipc")}}},
		{"schema", pipeline.ApplyItem{Schema: &pipeline.Schema{Stream: "s", ArrowSchema: []byte("sch")}},
			client.ApplyItem{Schema: &pluginv2.Stream{Name: "s", ArrowSchema: []byte("sch")}}},
		{"truncate", pipeline.ApplyItem{Truncate: "s"}, client.ApplyItem{Truncate: "s"}},
		{"resnapshot end", pipeline.ApplyItem{Resnapshot: &pipeline.ResnapshotMark{Stream: "s", End: true}},
			client.ApplyItem{Resnapshot: &pluginv2.ResnapshotMark{Stream: "s", End: true}}},
	} {
		got := applyItemOf(tc.item)
		// pluginv2 messages hold protobuf state that DeepEqual must not compare: compare what the client reads.
		same := got.Entry == tc.want.Entry && got.Truncate == tc.want.Truncate && reflect.DeepEqual(got.Batch, tc.want.Batch) &&
			(got.Schema == nil) == (tc.want.Schema == nil) && (got.Resnapshot == nil) == (tc.want.Resnapshot == nil)
		if same && got.Schema != nil {
			same = got.Schema.Name == tc.want.Schema.Name && string(got.Schema.ArrowSchema) == string(tc.want.Schema.ArrowSchema)
		}
		if same && got.Resnapshot != nil {
			same = got.Resnapshot.Stream == tc.want.Resnapshot.Stream && got.Resnapshot.End == tc.want.Resnapshot.End
		}
		if !same {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// TestRequire: a plugin asked for a role it lacks is refused with ErrKind, the message as the CLI printed it.
func TestRequire(t *testing.T) {
	p := &Plugin{Conn: &config.Connection{Name: "gen", Plugin: "datagen"}, Spec: Spec{Kind: KindSource}}
	if err := p.Require(KindSource, "connection gen"); err != nil {
		t.Fatalf("source as source: %v", err)
	}
	err := p.Require(KindDestination, "skippr.yml:3: pipelines.x.destinations")
	if !errors.Is(err, ErrKind) || err.Error() != "skippr.yml:3: pipelines.x.destinations: plugin datagen is not a destination" {
		t.Fatalf("source as destination: %v", err)
	}
}
