package registry

import "errors"

// Sentinel errors. Every error this package returns that a caller may want to
// classify wraps exactly one of these, so the CLI can map them to exit codes
// with errors.Is without parsing messages.
var (
	// ErrNotFound: an unknown plugin, a version that does not exist or matches
	// no constraint, a platform without a build, a file missing from a registry.
	ErrNotFound = errors.New("not found")
	// ErrUnreachable: the registry could not be contacted or the transfer broke
	// off (connection refused, DNS, 5xx, truncated body).
	ErrUnreachable = errors.New("registry unreachable")
	// ErrIncompatible: versions exist but none speaks a protocol the engine speaks.
	ErrIncompatible = errors.New("incompatible plugin protocol")
	// ErrNotInstalled: offline mode and the plugin is not on disk.
	ErrNotInstalled = errors.New("not installed")
	// ErrChecksum: a size or sha256 does not match what the signed index or the
	// lock file says.
	ErrChecksum = errors.New("checksum mismatch")
	// ErrSignature: index.json.sig is missing, malformed, made by an untrusted
	// key, or does not verify over index.json.
	ErrSignature = errors.New("signature verification failed")
	// ErrLockMismatch: skippr.lock disagrees with the config or the registry
	// (constraint no longer satisfied, registry republished a version with other
	// bytes, registry no longer trusted).
	ErrLockMismatch = errors.New("lock file mismatch")
	// ErrInvalid: bad input from the caller (a malformed name, version,
	// constraint, URL, key file, index or lock file).
	ErrInvalid = errors.New("invalid input")
)
