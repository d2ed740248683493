// Package harness is what the black-box tests of the skippr binary share (test/e2e, test/chaos, test/fleet): Env,
// one user's machine with a home, a config directory and a signed registry of plugins built from this tree, and
// its commands (Run, MustRun, Cmd); pipeline configs and the comparison of a destination with its source; the
// S3 server one test binary shares (Versity, stopped by the package's TestMain with pgtest.Main); and helpers
// several features' tests use (Postgres and MySQL writers, lake scans, metrics scrapes, status rows).
//
// A test package calls NewEnv (or NewEnvWith) per test and declares
//
//	func TestMain(m *testing.M) { pgtest.Main(m, harness.Versity.Stop, testplugins.Cleanup) }
//
// so the shared servers and the built binaries are removed when its binary exits.
package harness
