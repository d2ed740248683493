// Package connector is the one place where the engine starts a plugin for a connection of the config.
//
// Start resolves and verifies the plugin's binary through engine/pluginhost (checksum pins, protocol
// negotiation), starts it through plugin-sdk/client, and then checks it against the connection before anyone
// uses it:
//
//   - the binary says it is the plugin the connection names (unless the connection points at a local Path,
//     which is unverified by design): otherwise ErrIdentity;
//   - the connection's settings validate against the plugin's JSON Schema: otherwise ErrSettings, whose
//     message names the file, line and key.
//
// A failure to resolve, verify or start the binary matches ErrStart and wraps the registry's or the client's
// own error, so a caller can tell "not installed" from "checksum mismatch". Callers that need a role check it
// with Plugin.Require (ErrKind).
//
// A started Plugin keeps its spec and, once asked, its capabilities: the engine asks each plugin once per
// start, however many parts of it (the start checks, the pipeline, a re-snapshot request) need them.
//
// The types of this package (Spec, Kind, Stream, SyncMode) and engine/pipeline's (Capabilities, Message,
// ApplyItem, …) are the engine's view of a plugin and know nothing of the transport. A started Plugin is the
// commit loop's pipeline.Source and pipeline.Destination itself: it holds its settings, so the loop passes
// none. wire.go is the only file that maps the generated protocol types (pluginv2) and plugin-sdk/client's
// messages to them, so a new protocol version changes that file, not the engine — the way Conduit's
// pconnector/client keeps a client per protocol version over types free of the transport.
//
// Attach makes a Plugin of a client started elsewhere (tests and benchmarks that build their plugins).
//
// The caller owns a started Plugin and must Kill it.
package connector
