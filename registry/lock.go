package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
)

// LockFormat is the skippr.lock format this package reads and writes.
const LockFormat = 1

// Lock is skippr.lock: the exact plugin versions a pipeline runs, so every
// machine installs the same bytes. It sits beside the pipeline config and is
// meant to be committed.
type Lock struct {
	Format  int                     `json:"format"`
	Plugins map[string]LockedPlugin `json:"plugins"`
}

// LockedPlugin pins one plugin.
type LockedPlugin struct {
	Version          string `json:"version"`
	Constraint       string `json:"constraint"` // the constraint the version was resolved from
	Registry         string `json:"registry"`   // normalized URL of the registry it came from
	ProtocolVersions []int  `json:"protocol_versions"`
	Kind             string `json:"kind"`
	// SHA256 has the hash of every platform the signed index listed for the
	// version, so a lock made on a laptop verifies on a Linux server.
	SHA256 map[string]string `json:"sha256"`
}

// ReadLock reads a lock file; a missing file is an empty lock.
func ReadLock(path string) (*Lock, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &Lock{Format: LockFormat, Plugins: map[string]LockedPlugin{}}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read lock file: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var l Lock
	if err := dec.Decode(&l); err != nil {
		return nil, fmt.Errorf("lock file %s: %w: %v", path, ErrInvalid, err)
	}
	if l.Format != LockFormat {
		return nil, fmt.Errorf("lock file %s: %w: format %d, this skippr reads format %d", path, ErrInvalid, l.Format, LockFormat)
	}
	if l.Plugins == nil {
		l.Plugins = map[string]LockedPlugin{}
	}
	for name, p := range l.Plugins {
		if err := p.validate(name); err != nil {
			return nil, fmt.Errorf("lock file %s: %w", path, err)
		}
	}
	return &l, nil
}

func (p LockedPlugin) validate(name string) error {
	if err := ValidateName(name); err != nil {
		return err
	}
	if c, err := CanonicalVersion(p.Version); err != nil || c != p.Version {
		return fmt.Errorf("%w: plugin %s: version %q is not canonical", ErrInvalid, name, p.Version)
	}
	if _, err := NormalizeURL(p.Registry); err != nil {
		return fmt.Errorf("plugin %s: %w", name, err)
	}
	if len(p.SHA256) == 0 {
		return fmt.Errorf("%w: plugin %s: no sha256 recorded", ErrInvalid, name)
	}
	for pk, sum := range p.SHA256 {
		if _, err := ParsePlatform(pk); err != nil {
			return fmt.Errorf("plugin %s: %w", name, err)
		}
		if !isSHA256Hex(sum) {
			return fmt.Errorf("%w: plugin %s: sha256 for %s is not 64 lowercase hex digits", ErrInvalid, name, pk)
		}
	}
	return nil
}

// Write replaces the lock file atomically (temp file, fsync, rename, fsync
// of the directory).
func (l *Lock) Write(path string) error {
	l.Format = LockFormat
	b, err := marshalJSON(l)
	if err != nil {
		return fmt.Errorf("encode lock file: %w", err)
	}
	if err := writeFileAtomic(path, b, 0o644); err != nil {
		return fmt.Errorf("write lock file: %w", err)
	}
	return nil
}

func lockEntry(si *SignedIndex, version, constraint string, r *Release) LockedPlugin {
	sums := make(map[string]string, len(r.Platforms))
	for pk, a := range r.Platforms {
		sums[pk] = a.SHA256
	}
	return LockedPlugin{
		Version:          version,
		Constraint:       constraint,
		Registry:         si.Registry.URL,
		ProtocolVersions: slices.Clone(r.ProtocolVersions),
		Kind:             r.Kind,
		SHA256:           sums,
	}
}

// updateLock sets one plugin's entry in the lock file at path. The client's
// mutex serializes concurrent Ensure calls of one sync; across processes the
// read-modify-write is short and a lock file belongs to one pipeline, so no
// file lock is taken.
func (c *Client) updateLock(path, name string, e LockedPlugin) error {
	c.lockFileMu.Lock()
	defer c.lockFileMu.Unlock()
	l, err := ReadLock(path)
	if err != nil {
		return err
	}
	l.Plugins[name] = e
	return l.Write(path)
}
