package connector

// This file is the only one in the engine that knows the generated protocol types (pluginv2): it maps them to
// the types of types.go. A new protocol version changes this file.

import (
	"context"
	"time"

	"github.com/skippr-dev/skippr/plugin-sdk/client"
	pluginv2 "github.com/skippr-dev/skippr/plugin-sdk/proto/skippr/plugin/v2"
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

func capabilities(ctx context.Context, cl *client.Client, settings []byte) (Capabilities, any, error) {
	r, err := cl.Capabilities(ctx, settings)
	if err != nil {
		return Capabilities{}, nil, err
	}
	return capabilitiesOf(r), r, nil
}

func capabilitiesOf(r *pluginv2.CapabilitiesResponse) Capabilities {
	c := Capabilities{ExactlyOnce: r.ExactlyOnce, ExactlyOnceNote: r.ExactlyOnceNote, Deletes: r.Deletes,
		SchemaEvolution: r.SchemaEvolution, Truncate: r.Truncate, Coalesce: r.Coalesce, Resnapshot: r.Resnapshot,
		UnsupportedTypes: r.UnsupportedTypes}
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

// Wire is the plugin as engine/pipeline still takes it, in the protocol's types (pipeline.Source and
// pipeline.Destination): the client's calls, except that Capabilities answers from the plugin's cache. It goes
// when engine/pipeline takes this package's types.
func (p *Plugin) Wire() *Wire { return &Wire{Client: p.client, p: p} }

// Wire: see Plugin.Wire.
type Wire struct {
	*client.Client
	p *Plugin
}

// Capabilities returns the plugin's capabilities, asked once per start; settings are the plugin's own.
func (w *Wire) Capabilities(ctx context.Context, _ []byte) (*pluginv2.CapabilitiesResponse, error) {
	_, r, err := w.p.caps.get(ctx, w.p)
	if err != nil {
		return nil, err
	}
	return r.(*pluginv2.CapabilitiesResponse), nil
}
