package protocol

import (
	"context"
	"fmt"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	pluginv2 "github.com/skippr-dev/skippr/plugin-sdk/proto/skippr/plugin/v2"
)

// Version is the newest protocol version this SDK speaks, and the only one the engine of this repository
// speaks. A host lists the versions it speaks; go-plugin picks the highest both sides share and refuses the
// plugin when they share none.
//
// Version 2 is version 1 as skippr spoke it at SDK 0.2.0 (coalesced applies with entry marks, Truncate and
// ResnapshotMark items, the lake and query services, unsupported types), now promised: a plugin that offers 2
// was built with an SDK that reads every one of those messages. A plugin offering only 1 may predate them, and
// proto3 drops a oneof member it does not know without an error (a Truncate or an EntryStart would vanish), so
// an engine speaking 2 refuses it.
const Version = 2

// PluginVersions are the versions a plugin built with this SDK offers, newest first. It offers 1 as well
// because version 2 sends nothing an engine that speaks only 1 (skippr before protocol 2) does not know: a
// plugin rebuilt with this SDK keeps running under such an engine, so engine and plugins can be upgraded in
// either order.
var PluginVersions = []int{Version, 1}

// InfoFlag makes a plugin binary print its Info as JSON and exit, without a handshake. Registries read a
// binary's protocol versions this way.
const InfoFlag = "--skippr-plugin-info"

// ServiceResnapshot is the service (SpecResponse.services) of a source that copies streams again while it
// streams (ReadRequest.resnapshot, `skippr resnapshot`). The engine refuses a request up front for a source
// without it, rather than waiting for a copy that never starts.
const ServiceResnapshot = "source.resnapshot"

// PluginName is the key of the one plugin a skippr plugin binary serves.
const PluginName = "skippr"

// Handshake is shared by host and plugin. The cookie only stops a plugin binary from being run by hand by
// mistake; it is not a security measure (the checksum is).
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  Version,
	MagicCookieKey:   "SKIPPR_PLUGIN_MAGIC_COOKIE",
	MagicCookieValue: "7c2f9d3e-skippr-wal-first",
}

// Info is what InfoFlag prints.
type Info struct {
	Name             string `json:"name"`
	Version          string `json:"version"`
	Kind             string `json:"kind"`
	ProtocolVersions []int  `json:"protocol_versions"`
}

// ChunkSize bounds the data bytes in one gRPC message so a batch of any size stays under gRPC's 4 MiB default.
const ChunkSize = 1 << 20

// MaxMessageSize is set on both ends anyway, so a chunk plus its envelope always fits.
const MaxMessageSize = 16 << 20

// Transport sizes for the plugin connection, the same on both ends. gRPC's defaults (32 KiB write buffers, a
// 64 KiB flow-control window grown by probing) suit many small calls; a Read or Apply stream carries
// megabytes of Arrow a second, and with them each side woke the other for every few KiB: in the Postgres
// snapshot profile that was an eighth of the plugin's CPU and a sixth of the engine's (BENCHMARKS.md). The
// window bounds what a receiver buffers per stream and per connection before its reader takes it.
const (
	transportBuffer = 1 << 20
	flowWindow      = 16 << 20
)

// DialOptions are the host's transport options for a plugin connection.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithWriteBufferSize(transportBuffer), grpc.WithReadBufferSize(transportBuffer),
		grpc.WithInitialWindowSize(flowWindow), grpc.WithInitialConnWindowSize(flowWindow)}
}

// ServerOptions are the plugin's transport options.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.WriteBufferSize(transportBuffer), grpc.ReadBufferSize(transportBuffer),
		grpc.InitialWindowSize(flowWindow), grpc.InitialConnWindowSize(flowWindow)}
}

// GRPCPlugin adapts a pluginv2.PluginServer to go-plugin. On the host side Impl is nil.
type GRPCPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	Impl pluginv2.PluginServer
}

// GRPCServer registers the plugin's service on go-plugin's gRPC server.
func (p *GRPCPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	if p.Impl == nil {
		return fmt.Errorf("skippr plugin: no implementation to serve")
	}
	pluginv2.RegisterPluginServer(s, p.Impl)
	return nil
}

// GRPCClient returns the protocol client over go-plugin's connection.
func (p *GRPCPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return pluginv2.NewPluginClient(c), nil
}

// PluginSets returns the versioned plugin sets for go-plugin, one per protocol version in versions; every
// version is served by the same implementation.
func PluginSets(impl pluginv2.PluginServer, versions []int) map[int]plugin.PluginSet {
	sets := make(map[int]plugin.PluginSet, len(versions))
	for _, v := range versions {
		sets[v] = plugin.PluginSet{PluginName: &GRPCPlugin{Impl: impl}}
	}
	return sets
}
