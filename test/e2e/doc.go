// Package e2e holds the end-to-end tests of features: each builds the skippr binary and its plugins
// (internal/testplugins), runs them as a user would (test/harness.Env) against real servers from the testkit, and
// checks what reached the destination. The SIGKILL and fault-injection tests are in test/chaos, the fleet's in
// test/fleet; each package is its own test binary, so `go test` runs them side by side.
package e2e
