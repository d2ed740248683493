package registry

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// writeFileAtomic replaces path with data so that a reader (or a crash) sees
// either the old file or the new one, never a mix: temp file in the same
// directory, fsync, rename, fsync the directory.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := f.Chmod(perm); err != nil {
		return fmt.Errorf("chmod %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("rename %s to %s: %w", tmp, path, err)
	}
	ok = true
	return syncDir(dir)
}

// syncDir makes a rename or create in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	return nil
}

// HashFile returns the lowercase hex sha256 of the file at path.
func HashFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// VerifyFile re-hashes the file at path and fails with ErrChecksum unless its
// sha256 is wantSHA256 (hex). The engine calls it before every plugin start so
// a binary swapped on disk after installation is never run.
func VerifyFile(path, wantSHA256 string) error {
	wantSHA256 = strings.ToLower(wantSHA256)
	if !isSHA256Hex(wantSHA256) {
		return fmt.Errorf("%s: %w: expected sha256 %q is not 64 hex digits", path, ErrChecksum, wantSHA256)
	}
	got, err := HashFile(path)
	if err != nil {
		return err
	}
	if got != wantSHA256 {
		return fmt.Errorf("%s: %w: sha256 is %s, expected %s", path, ErrChecksum, got, wantSHA256)
	}
	return nil
}

// marshalJSON renders v indented with a trailing newline, without escaping
// <, > and & (constraints like "~> 1.2" and URL queries stay readable).
func marshalJSON(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
