// Package serve is what a plugin author imports: the Go interfaces a source or destination implements, and
// Serve, which runs the plugin process under go-plugin. A plugin's main is one call:
//
//	func main() { serve.Serve(mySource{}) }
//
// # Sources
//
// A Source emits change batches, schema changes, truncates and resnapshot marks through an Emitter, in log order,
// and a Checkpoint at each transaction boundary: everything emitted before a checkpoint belongs to it, the engine
// never splits what lies between two checkpoints across a crash, and it Acks a checkpoint (in order, possibly
// several at once) only when all of it is durable in the engine's WAL. Only then may the source release it.
//
// # Destinations
//
// A destination implements SessionDestination. The contract:
//
//   - Open parses settings and connects once. Serve keeps one Session per distinct settings (byte for byte) for
//     the life of the plugin process, never opens one settings value twice at once, opens again after a failed
//     Open, and calls Session.Close when the host ends the plugin or the host process is gone. Calls on one
//     session may overlap.
//   - Session.Apply commits one WAL entry, or with Capabilities.Coalesce the range Range.FirstSequence..Sequence,
//     atomically together with the record of Range.Sequence for the pipeline; LastApplied returns that record.
//     After a crash either both are in the destination or neither is.
//   - The session reads its fence in the transaction it commits in, returns ApplyResult{Skipped: true} when
//     Range.Covers(fence), and otherwise applies what Range.Entries(fence) yields: the items of the entries above
//     the fence, in log order, each entry closed by a Step with End. A yielded record is the SDK's and valid
//     until the next step (Retain to keep it). An error yielded ends the apply with an error; stopping early is
//     allowed.
//   - Capabilities are promises the engine relies on: Truncate, Resnapshot and Deletes items are applied in order
//     with the rows around them, in the same commit; TypeLimits names the Arrow types the destination refuses.
//   - Errors carry a fault class (package fault) when the caller can act on it: a transient one is retried, a
//     config one stops the pipeline with its fix.
//
// Sessions serves a SessionDestination through the older Destination and StreamingDestination interfaces: Serve
// uses it, and so can tests that call a destination in-process. A plugin written against those interfaces (SDK
// 0.3) is still served as it was: Apply with every item at once, or ApplyStream with the items as they arrive.
//
// # Services
//
// A plugin offers an optional service (LakePlanner, LakeCompactor, QueryEngine, Resnapshotter) by implementing
// its interface; Serve announces it in Spec.
package serve
