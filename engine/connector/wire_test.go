package connector

import (
	"errors"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/engine/config"
	pluginv2 "github.com/skippr-dev/skippr/plugin-sdk/proto/skippr/plugin/v2"
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
		got := capabilitiesOf(tc.wire)
		if got.ExactlyOnce != tc.want.ExactlyOnce || got.ExactlyOnceNote != tc.want.ExactlyOnceNote || got.Deletes != tc.want.Deletes ||
			got.SchemaEvolution != tc.want.SchemaEvolution || got.Truncate != tc.want.Truncate || got.Coalesce != tc.want.Coalesce ||
			got.Resnapshot != tc.want.Resnapshot || len(got.UnsupportedTypes) != len(tc.want.UnsupportedTypes) ||
			(got.ApplyDefaults == nil) != (tc.want.ApplyDefaults == nil) ||
			(got.ApplyDefaults != nil && *got.ApplyDefaults != *tc.want.ApplyDefaults) {
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
