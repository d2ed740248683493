// Package pluginv2 is the code protoc generates from plugin.proto: the messages and the gRPC service of the
// skippr plugin protocol, version 2 (protocol.Version), which plugins built with earlier SDKs speak as well.
//
// Why the wire says v1 and this package v2: the proto package, skippr.plugin.v1, is written into every message
// type name and every gRPC method name ("/skippr.plugin.v1.Plugin/Apply"). Renaming it would be a new wire
// that no plugin built with an earlier SDK answers. Version 2 only promises more about the same messages (see
// protocol.Version), so the wire keeps its first name and the Go package, which never crosses the wire, is
// named for the protocol version it serves.
//
// # What it promises
//
//   - The files plugin.pb.go and plugin_grpc.pb.go are generated (`make proto`) and never edited by hand.
//   - Message and method names on the wire do not change within a protocol version; a new field or oneof
//     member an older peer would drop silently comes with a new protocol.Version.
//
// # What a caller must do
//
//   - Use it only at the plugin boundary: plugin-sdk's serve and client, and in the engine only
//     engine/connector, which maps these types to the engine's own.
package pluginv2
