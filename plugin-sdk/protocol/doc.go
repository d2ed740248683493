// Package protocol holds what both sides of the plugin boundary must agree on: the go-plugin handshake, the
// protocol versions, the Arrow IPC codec and the chunking of IPC bytes into gRPC messages. The service
// definitions themselves are proto/skippr/plugin/v2/plugin.proto (its generated code is checked in).
//
// # What it promises
//
//   - Versions: a host lists the versions it speaks, a plugin those it offers (PluginVersions); go-plugin picks
//     the highest both share, and a plugin that shares none is refused before any call. A version number is a
//     promise about which messages a side understands: it is raised whenever a message appears that an older
//     peer would drop silently (proto3 drops an unknown oneof member without an error).
//   - Batches: a change batch crosses the boundary as one self-contained Arrow IPC stream (EncodeRecord), the
//     same bytes the engine stores in its WAL, so the engine never decodes a batch to persist it. Chunks cuts
//     the bytes into messages of at most ChunkSize data bytes, in order and never interleaved with another
//     batch's; Assembler joins them back and reports a batch cut short (Pending) when a stream ends.
//   - SchemaID is a stable fingerprint of a whole schema (fields and metadata) that both sides may compare.
//   - InfoFlag: every plugin binary answers `--skippr-plugin-info` with its Info as JSON, without a
//     handshake, which is how registries and hosts learn its name, kind and versions before starting it.
//
// # What a caller must do
//
//   - Release every record DecodeRecords returns. Keep the handshake's cookie as it is: it stops a plugin from
//     being run by hand by mistake and is no security measure (the binary's checksum is).
//   - Raise SDKVersion with every change a plugin author can see, and Version only with a change of the wire.
package protocol
