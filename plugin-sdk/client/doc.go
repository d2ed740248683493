// Package client starts a plugin binary and speaks the protocol to it. The engine (through its connector
// package) and the conformance kit both use it, so a third party tests its plugin exactly the way the engine
// will run it.
//
// # What it promises
//
//   - Start runs the binary with only Config.Env as its environment (the host's own is never passed on), checks
//     its SHA-256 against Config.SHA256 before the handshake when one is given (a replaced binary is refused
//     with an error that says so), and negotiates the highest protocol version both sides speak; when they
//     share none the error is a *ProtocolError naming what the plugin offers.
//   - The plugin listens on a Unix socket in a 0700 directory made for it alone and removed by Kill; a start
//     also removes the directories left by engines that no longer run (a SIGKILLed engine cannot).
//   - The plugin dies with the host: on Linux the kernel sends it SIGKILL when the engine dies, even by
//     SIGKILL, so old and new plugin processes never overlap at a restart; elsewhere serve's parent watch ends it.
//   - Every call's error names the plugin and the call. An error the plugin returned is a *RemoteError that
//     unwraps to its fault class (errors.Is(err, fault.ErrConfig)); when the process died, the error carries
//     the last lines of its stderr. A failed Check is a *CheckError.
//   - ApplyRange streams a range's items as they are produced, so neither side holds a whole range in memory;
//     Read returns a stream whose Next yields batches, schema changes, marks and checkpoints in log order.
//
// # What a caller must do
//
//   - Call Kill exactly once for every Client Start returned, also after errors: cancelling the context given
//     to Start bounds only the start, so that a SIGTERM to the engine still lets Kill stop the plugin
//     gracefully. Cancelled while the start is under way, Start SIGKILLs the process and returns at once
//     (within milliseconds, not when the handshake or StartTimeout comes) with an error wrapping the
//     context's, and leaves no process or socket directory behind.
//   - Treat the returned types as the wire's (package pluginv2): they change with the protocol. The engine maps
//     them to its own types in one place (engine/connector), and so should any other host.
//   - Calls may be made from several goroutines; a ReadStream is read by one goroutine.
package client
