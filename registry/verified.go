package registry

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Verifying an installed plugin without reading it.
//
// Every plugin start used to hash its binary twice (here, and in go-plugin right before exec): 0.6 s of CPU for
// the quickstart's three plugins, the larger part of a start. A binary is now hashed once per change of its
// inode: after a successful hash the verifier writes a stamp beside the binary,
//
//	<version dir>/.verified   {"sha256": "<hex>", "file": {dev, ino, size, mtime_ns, ctime_ns}}
//
// and a later start whose stat of the binary equals the stamp's, for the same pinned sha256, is verified.
// Why that stays honest:
//   - Every way of changing the bytes (write, truncate, rename over it, chmod or touch to hide it) sets the
//     inode's ctime to the current time, and no user can set ctime back; a different file has another dev/ino.
//   - The clock that stamps ctime is coarse (a kernel tick), so a write right after the hash could leave the
//     same ctime. A stamp is therefore written only when the file was last changed at least racyWindow before
//     the hash began (git's "racily clean" rule): a later change then has a later ctime.
//   - The file is stat'ed before and after the hash; if it changed meanwhile the check fails.
//   - The start itself checks that the process runs that very inode, unchanged (see FileID and
//     engine/pluginhost): the window between this check and exec is closed, which go-plugin's
//     hash-then-exec-by-path never closed.
//
// Whoever can write the stamp can write the binary too (same directory, same owner), so the stamp adds no
// way in. On systems without a ctime in os.FileInfo the binary is hashed every time.
const stampName = ".verified"

// racyWindow is how long before a hash a file must have been last changed for its stamp to be trusted later.
const racyWindow = 2 * time.Second

// FileID identifies a file's bytes without reading them, as long as nobody can set ctime back. The zero
// FileID means "unknown" (no stat support): nothing is cached and the caller hashes again.
type FileID struct {
	Dev     uint64 `json:"dev"`
	Ino     uint64 `json:"ino"`
	Size    int64  `json:"size"`
	MtimeNs int64  `json:"mtime_ns"`
	CtimeNs int64  `json:"ctime_ns"`
}

// IsZero reports whether the identity is unknown.
func (f FileID) IsZero() bool { return f == FileID{} }

// StatID returns the identity of the file at path (following symlinks), or the zero FileID where the
// platform has none.
func StatID(path string) (FileID, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return FileID{}, err
	}
	return fileID(fi), nil
}

type stamp struct {
	SHA256 string `json:"sha256"`
	File   FileID `json:"file"`
}

// VerifyInstalled is VerifyFile for an installed binary: it returns the identity of the bytes it verified,
// reading them only when the stamp beside the binary does not vouch for them (see the top of this file).
func VerifyInstalled(path, wantSHA256 string) (FileID, error) {
	return stampedVerifier{window: racyWindow, now: time.Now, hash: VerifyFile}.verify(path, wantSHA256)
}

// stampedVerifier holds what the tests vary: the racy window, the clock and the hash (to count reads).
type stampedVerifier struct {
	window time.Duration
	now    func() time.Time
	hash   func(path, wantSHA256 string) error
}

func (v stampedVerifier) verify(path, wantSHA256 string) (FileID, error) {
	before, err := StatID(path)
	if err != nil {
		return FileID{}, fmt.Errorf("verify %s: %w", path, err)
	}
	stampPath := filepath.Join(filepath.Dir(path), stampName)
	if !before.IsZero() {
		if s, err := readStamp(stampPath); err == nil && s.SHA256 == wantSHA256 && s.File == before {
			return before, nil
		}
	}
	started := v.now()
	if err := v.hash(path, wantSHA256); err != nil {
		return FileID{}, err
	}
	after, err := StatID(path)
	if err != nil {
		return FileID{}, fmt.Errorf("verify %s: %w", path, err)
	}
	if after != before {
		return FileID{}, fmt.Errorf("%s: %w: the file changed while it was being verified", path, ErrChecksum)
	}
	changed := time.Unix(0, max(before.CtimeNs, before.MtimeNs))
	if !before.IsZero() && changed.Before(started.Add(-v.window)) {
		// A stamp that cannot be written (a read-only home) only costs the next start a hash.
		_ = writeStamp(stampPath, stamp{SHA256: wantSHA256, File: before})
	}
	return before, nil
}

func readStamp(path string) (stamp, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return stamp{}, err
	}
	var s stamp
	if err := json.Unmarshal(b, &s); err != nil {
		return stamp{}, err
	}
	if s.File.IsZero() {
		return stamp{}, errors.New("stamp names no file")
	}
	return s, nil
}

// writeStamp replaces the stamp by rename. It is not fsynced: a stamp lost in a crash costs one hash, and a
// torn one does not parse.
func writeStamp(path string, s stamp) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), stampName+".tmp-")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return nil
}
