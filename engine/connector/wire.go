package connector

// This file is the only one in the engine that knows the generated protocol types (pluginv2) and the client's
// message types: it maps them to the types of types.go and to engine/pipeline's, and makes a Plugin the
// pipeline.Source and pipeline.Destination the commit loop takes. A new protocol version changes this file.

import (
	"context"
	"iter"
	"time"

	"github.com/skippr-dev/skippr/engine/pipeline"
	"github.com/skippr-dev/skippr/plugin-sdk/client"
	pluginv2 "github.com/skippr-dev/skippr/plugin-sdk/proto/skippr/plugin/v2"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
)

// A started plugin is the commit loop's source and destination.
var (
	_ pipeline.Source      = (*Plugin)(nil)
	_ pipeline.Destination = (*Plugin)(nil)
)

func spec(ctx context.Context, cl *client.Client) (Spec, error) {
	r, err := cl.Spec(ctx)
	if err != nil {
		return Spec{}, err
	}
	return Spec{Name: r.Name, Version: r.Version, Description: r.Description, Kind: kindOf(r.Kind),
		SettingsSchema: r.SettingsSchema, Services: r.Services}, nil
}

func kindOf(k pluginv2.Kind) Kind {
	switch k {
	case pluginv2.Kind_KIND_SOURCE:
		return KindSource
	case pluginv2.Kind_KIND_DESTINATION:
		return KindDestination
	case pluginv2.Kind_KIND_BOTH:
		return KindBoth
	}
	return 0
}

func capabilities(ctx context.Context, cl *client.Client, settings []byte) (Capabilities, error) {
	r, err := cl.Capabilities(ctx, settings)
	if err != nil {
		return Capabilities{}, err
	}
	return capabilitiesOf(r), nil
}

func capabilitiesOf(r *pluginv2.CapabilitiesResponse) Capabilities {
	c := Capabilities{ExactlyOnce: r.ExactlyOnce, ExactlyOnceNote: r.ExactlyOnceNote, Deletes: r.Deletes,
		SchemaEvolution: r.SchemaEvolution, Truncate: r.Truncate, Coalesce: r.Coalesce, Resnapshot: r.Resnapshot,
		FullRow: r.FullRow, RenamedStream: r.RenamedStream, UnsupportedTypes: r.UnsupportedTypes}
	if d := r.ApplyDefaults; d != nil {
		c.ApplyDefaults = &ApplyDefaults{MaxInterval: time.Duration(d.MaxIntervalMs) * time.Millisecond,
			MaxBytes: d.MaxBytes, MaxEntries: d.MaxEntries}
	}
	return c
}

// Discover returns the streams a source offers.
func (p *Plugin) Discover(ctx context.Context) ([]Stream, error) {
	rs, err := p.client.Discover(ctx, p.Settings)
	if err != nil {
		return nil, err
	}
	out := make([]Stream, 0, len(rs))
	for _, r := range rs {
		s := Stream{Name: r.Name, ArrowSchema: r.ArrowSchema, PrimaryKey: r.PrimaryKey, SchemaID: r.SchemaId}
		for _, m := range r.Modes {
			s.Modes = append(s.Modes, modeOf(m))
		}
		out = append(out, s)
	}
	return out, nil
}

func modeOf(m pluginv2.SyncMode) SyncMode {
	switch m {
	case pluginv2.SyncMode_SYNC_MODE_SNAPSHOT:
		return ModeSnapshot
	case pluginv2.SyncMode_SYNC_MODE_CDC:
		return ModeCDC
	case pluginv2.SyncMode_SYNC_MODE_APPEND_ONLY:
		return ModeAppendOnly
	}
	return ModeUnspecified
}

// Read starts a Read of a source (pipeline.Source).
func (p *Plugin) Read(ctx context.Context, pipelineName string, streams []string, checkpoint []byte, resnapshot []string) (pipeline.Messages, error) {
	rs, err := p.client.ReadFor(ctx, pipelineName, p.Settings, streams, checkpoint, resnapshot)
	if err != nil {
		return nil, err
	}
	return messages{rs}, nil
}

// messages is a running Read in the engine's types.
type messages struct{ rs *client.ReadStream }

func (m messages) Next() (pipeline.Message, error) {
	msg, err := m.rs.Next()
	if err != nil {
		return pipeline.Message{}, err
	}
	return messageOf(msg), nil
}

func messageOf(m client.Message) pipeline.Message {
	var out pipeline.Message
	switch {
	case m.Batch != nil:
		out.Batch = &pipeline.Batch{Stream: m.Batch.Stream, Rows: m.Batch.Rows, IPC: m.Batch.IPC}
	case m.Schema != nil:
		out.Schema = &pipeline.Schema{Stream: m.Schema.Name, ArrowSchema: m.Schema.ArrowSchema}
	case m.Checkpoint != nil:
		out.Checkpoint = checkpointOf(m.Checkpoint)
	case m.Truncate != "":
		out.Truncate = m.Truncate
	case m.Resnapshot != nil:
		out.Resnapshot = &pipeline.ResnapshotMark{Stream: m.Resnapshot.Stream, End: m.Resnapshot.End}
	}
	return out
}

func checkpointOf(cp *pluginv2.Checkpoint) *pipeline.SourceCheckpoint {
	out := &pipeline.SourceCheckpoint{Position: cp.Position, RowsDone: cp.RowsDone, RowsTotal: cp.RowsTotal,
		Lag: time.Duration(cp.LagMs) * time.Millisecond, Idle: cp.Idle}
	for _, m := range cp.Metrics {
		out.Metrics = append(out.Metrics, pipeline.SourceMetric{Name: m.Name, Value: m.Value, Labels: m.Labels, Help: m.Help})
	}
	return out
}

// Ack tells a source that everything through checkpoint is durable (pipeline.Source).
func (p *Plugin) Ack(ctx context.Context, checkpoint []byte) error {
	return p.client.Ack(ctx, checkpoint)
}

// LastApplied is the highest WAL sequence number a destination holds for pipeline (pipeline.Destination).
func (p *Plugin) LastApplied(ctx context.Context, pipeline string) (uint64, error) {
	r, err := p.client.LastApplied(ctx, p.Settings, pipeline)
	if err != nil {
		return 0, err
	}
	return r.Sequence, nil
}

// ApplyRange applies the WAL entries first..last to a destination as one apply (pipeline.Destination).
func (p *Plugin) ApplyRange(ctx context.Context, pipe string, first, last uint64, items iter.Seq[pipeline.ApplyItem]) (pipeline.ApplyResult, error) {
	wire := func(yield func(client.ApplyItem) bool) {
		for it := range items {
			if !yield(applyItemOf(it)) {
				return
			}
		}
	}
	r, err := p.client.ApplyRange(ctx, p.Settings, pipe, first, last, wire)
	if err != nil {
		return pipeline.ApplyResult{}, err
	}
	return pipeline.ApplyResult{Skipped: r.Skipped, Rows: r.Rows}, nil
}

func applyItemOf(it pipeline.ApplyItem) client.ApplyItem {
	var out client.ApplyItem
	switch {
	case it.Entry != 0:
		out.Entry = it.Entry
	case it.Batch != nil:
		out.Batch = &protocol.Batch{Stream: it.Batch.Stream, Rows: it.Batch.Rows, IPC: it.Batch.IPC}
	case it.Schema != nil:
		out.Schema = &pluginv2.Stream{Name: it.Schema.Stream, ArrowSchema: it.Schema.ArrowSchema}
	case it.Truncate != "":
		out.Truncate = it.Truncate
	case it.Resnapshot != nil:
		out.Resnapshot = &pluginv2.ResnapshotMark{Stream: it.Resnapshot.Stream, End: it.Resnapshot.End}
	}
	return out
}
