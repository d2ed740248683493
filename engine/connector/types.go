package connector

import (
	"slices"

	"github.com/skippr-dev/skippr/engine/pipeline"
)

// Kind is the role a plugin can take in a pipeline.
type Kind uint8

const (
	KindSource      Kind = 1 << iota // reads changes
	KindDestination                  // applies WAL entries
	KindBoth        = KindSource | KindDestination
)

// Spec is what a plugin says about itself at start.
type Spec struct {
	Name        string
	Version     string
	Description string
	Kind        Kind
	// SettingsSchema is the JSON Schema a connection's settings must satisfy.
	SettingsSchema []byte
	// Services are the optional services the plugin offers (protocol.Service…, lakequery.Service…).
	Services []string
}

// Is reports whether the plugin can take role k.
func (s Spec) Is(k Kind) bool { return s.Kind&k == k }

// Offers reports whether the plugin names an optional service.
func (s Spec) Offers(service string) bool { return slices.Contains(s.Services, service) }

// Capabilities are what a destination can do: the commit loop's type (engine/pipeline), which the start
// checks (engine/precheck) read as well.
type Capabilities = pipeline.Capabilities

// ApplyDefaults are a destination's proposed apply limits; 0 is no proposal for that limit.
type ApplyDefaults = pipeline.ApplyDefaults

// SyncMode is a way a source can read a stream.
type SyncMode uint8

const (
	ModeUnspecified SyncMode = iota
	ModeSnapshot             // a full read of the current state
	ModeCDC                  // changes after the snapshot
	ModeAppendOnly           // inserts only, no key
)

// String is the mode's name as `skippr discover` prints it.
func (m SyncMode) String() string {
	switch m {
	case ModeSnapshot:
		return "snapshot"
	case ModeCDC:
		return "cdc"
	case ModeAppendOnly:
		return "append_only"
	}
	return "unspecified"
}

// Stream is one stream a source offers.
type Stream struct {
	Name        string
	ArrowSchema []byte // Arrow IPC stream bytes of the schema only (protocol.DecodeSchema)
	PrimaryKey  []string
	Modes       []SyncMode
	SchemaID    string
}
