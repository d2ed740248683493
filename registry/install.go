package registry

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Install layout under $SKIPPR_HOME.
const (
	pluginsDir   = "plugins"
	lockFileName = ".lock"
	tmpPrefix    = ".tmp-"
	trashPrefix  = ".trash-"
)

// BinaryName is the file name of an installed plugin binary.
func BinaryName(name string) string { return "skippr-plugin-" + name }

// PluginPath is where plugin name at version is installed:
// $SKIPPR_HOME/plugins/<name>/<version>/skippr-plugin-<name>.
func PluginPath(home, name, version string) string {
	return filepath.Join(home, pluginsDir, name, version, BinaryName(name))
}

// Installed is a plugin binary on disk whose sha256 was verified.
type Installed struct {
	Name     string `json:"name"`
	Version  string `json:"version"`
	Path     string `json:"path"`
	SHA256   string `json:"sha256"`
	Registry string `json:"registry,omitempty"` // where it came from, when known
	// File is the identity of the bytes that were verified (zero when unknown): the plugin host checks that
	// the process it starts runs that file, unchanged, instead of hashing it again (verified.go).
	File FileID `json:"-"`
}

// homeLock is an exclusive flock on $SKIPPR_HOME/plugins/.lock. Every process
// that creates, replaces or removes anything under plugins/ holds it, so two
// concurrent installs never interleave and temp directories found while
// holding it are leftovers of a crash.
type homeLock struct{ f *os.File }

func lockHome(ctx context.Context, home string) (*homeLock, error) {
	dir := filepath.Join(home, pluginsDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	p := filepath.Join(dir, lockFileName)
	f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", p, err)
	}
	// Poll with LOCK_NB so a waiting install still honours ctx.
	for delay := 5 * time.Millisecond; ; delay = min(2*delay, 200*time.Millisecond) {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			f.Close()
			return nil, fmt.Errorf("flock %s: %w", p, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("wait for %s (another skippr is installing): %w", p, ctx.Err())
		case <-time.After(delay):
		}
	}
	l := &homeLock{f: f}
	l.sweep(dir)
	return l, nil
}

// sweep removes temp and trash directories a crashed install left behind.
func (l *homeLock) sweep(dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), tmpPrefix) || strings.HasPrefix(e.Name(), trashPrefix) {
			os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
}

func (l *homeLock) unlock() { l.f.Close() } // closing the descriptor releases the flock

// Install resolves name@constraint in the trusted registries, installs the
// binary unless the same bytes are already installed, and, when lockPath is
// not empty, records the choice in that lock file (replacing any previous
// entry for name: this is the explicit upgrade path).
func (c *Client) Install(ctx context.Context, name, constraint, lockPath string) (Installed, error) {
	si, res, err := c.Resolve(ctx, name, constraint)
	if err != nil {
		return Installed{}, err
	}
	inst, err := c.installRelease(ctx, si, res.Name, res.Version, res.Release, "")
	if err != nil {
		return Installed{}, err
	}
	if lockPath != "" {
		if err := c.updateLock(lockPath, name, lockEntry(si, res.Version, constraint, res.Release)); err != nil {
			return Installed{}, err
		}
	}
	return inst, nil
}

// installRelease makes version of name from si present under Home, verified.
// wantLockSHA, when set, is the sha256 the lock file demands for this
// platform; the index must agree with it.
func (c *Client) installRelease(ctx context.Context, si *SignedIndex, name, version string, rel *Release, wantLockSHA string) (Installed, error) {
	pk := c.opts.Platform.String()
	art, ok := rel.Platforms[pk]
	if !ok {
		return Installed{}, fmt.Errorf("%w: plugin %s %s has no build for %s in %s (built for %s)",
			ErrNotFound, name, version, pk, si.Registry.URL, strings.Join(rel.PlatformKeys(), ", "))
	}
	if wantLockSHA != "" && art.SHA256 != wantLockSHA {
		return Installed{}, fmt.Errorf("%w: plugin %s %s for %s: registry %s now lists sha256 %s, skippr.lock pins %s; the version was republished with other bytes — refusing to install it",
			ErrLockMismatch, name, version, pk, si.Registry.URL, art.SHA256, wantLockSHA)
	}
	if !intersects(rel.ProtocolVersions, c.opts.Protocols) {
		return Installed{}, fmt.Errorf("%w: plugin %s %s speaks protocol %v, the engine speaks %v",
			ErrIncompatible, name, version, rel.ProtocolVersions, c.opts.Protocols)
	}

	lk, err := lockHome(ctx, c.opts.Home)
	if err != nil {
		return Installed{}, err
	}
	defer lk.unlock()

	dest := PluginPath(c.opts.Home, name, version)
	inst := Installed{Name: name, Version: version, Path: dest, SHA256: art.SHA256, Registry: si.Registry.URL}
	if err := VerifyFile(dest, art.SHA256); err == nil {
		c.opts.Log.Debug("plugin already installed", "plugin", name, "version", version, "path", dest)
		return inst, nil
	}
	if err := c.download(ctx, si, name, version, art); err != nil {
		return Installed{}, err
	}
	c.opts.Log.Info("installed plugin", "plugin", name, "version", version, "registry", si.Registry.URL, "sha256", art.SHA256)
	return inst, nil
}

// artifactCheck is one verification of downloaded bytes; download runs them
// all before anything is moved into place.
type artifactCheck func(got downloaded) error

type downloaded struct {
	size   int64
	sha256 string
}

func checkSize(where string, want int64) artifactCheck {
	return func(got downloaded) error {
		if got.size != want {
			return fmt.Errorf("%s: %w: got %d bytes, the signed index says %d", where, ErrChecksum, got.size, want)
		}
		return nil
	}
}

func checkSHA256(where, want string) artifactCheck {
	return func(got downloaded) error {
		if got.sha256 != want {
			return fmt.Errorf("%s: %w: sha256 is %s, the signed index says %s", where, ErrChecksum, got.sha256, want)
		}
		return nil
	}
}

// download fetches art into a temp directory under plugins/, verifies it and
// renames the directory into place. The caller holds the home lock. On any
// error nothing is left behind.
func (c *Client) download(ctx context.Context, si *SignedIndex, name, version string, art Artifact) (err error) {
	plugins := filepath.Join(c.opts.Home, pluginsDir)
	tmp, err := os.MkdirTemp(plugins, tmpPrefix+name+"-"+version+"-")
	if err != nil {
		return fmt.Errorf("install %s %s: %w", name, version, err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()
	where := fmt.Sprintf("plugin %s %s", name, version)
	tmpBin := filepath.Join(tmp, BinaryName(name))
	_, from, err := fetchVerified(ctx, si.src, art, c.sourceOptions(), tmpBin, newProgress(c.opts.Progress, c.opts.ProgressTTY, name+" "+version, art.Size), where)
	if err != nil {
		return err
	}
	if err := os.Chmod(tmpBin, 0o755); err != nil {
		return fmt.Errorf("install %s: %w", where, err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("install %s: %w", where, err)
	}
	if err := syncDir(tmp); err != nil {
		return err
	}

	nameDir := filepath.Join(plugins, name)
	if err := os.MkdirAll(nameDir, 0o755); err != nil {
		return fmt.Errorf("install %s: %w", where, err)
	}
	dest := filepath.Join(nameDir, version)
	// A version directory that failed verification (tampered or damaged) is
	// moved aside first: rename cannot replace a non-empty directory.
	aside := ""
	if _, statErr := os.Lstat(dest); statErr == nil {
		trash, err := os.MkdirTemp(plugins, trashPrefix)
		if err != nil {
			return fmt.Errorf("install %s: %w", where, err)
		}
		defer os.RemoveAll(trash)
		aside = filepath.Join(trash, "old")
		if err := os.Rename(dest, aside); err != nil {
			return fmt.Errorf("install %s: move aside %s: %w", where, dest, err)
		}
	}
	if err := os.Rename(tmp, dest); err != nil {
		if aside != "" {
			os.Rename(aside, dest) // put back what was there
		}
		return fmt.Errorf("install %s: rename into %s: %w", where, dest, err)
	}
	if err := syncDir(nameDir); err != nil {
		return err
	}
	c.opts.Log.Debug("downloaded plugin", "plugin", name, "version", version, "from", from)
	return syncDir(plugins)
}

// fetchVerified copies art to path (created 0600), hashing as it goes, and
// runs the size and sha256 checks. It reads at most art.Size+1 bytes so a
// hostile server cannot fill the disk. On error path is removed.
func fetchVerified(ctx context.Context, src Source, art Artifact, opts SourceOptions, path string, bar *progress, where string) (got downloaded, from string, err error) {
	rc, size, from, err := openArtifact(ctx, src, art, opts)
	if err != nil {
		return got, "", fmt.Errorf("%s: %w", where, err)
	}
	defer rc.Close()
	checks := []artifactCheck{checkSize(where+" from "+from, art.Size), checkSHA256(where+" from "+from, art.SHA256)}
	if size >= 0 && size != art.Size {
		// Fail before transferring anything when the server announces the
		// wrong length.
		return got, from, checks[0](downloaded{size: size})
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return got, from, fmt.Errorf("%s: %w", where, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(path)
		}
	}()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h, bar), io.LimitReader(rc, art.Size+1))
	if bar != nil {
		bar.finish()
	}
	if err != nil {
		return got, from, fmt.Errorf("%s: download: %w", where, err)
	}
	got = downloaded{size: n, sha256: hex.EncodeToString(h.Sum(nil))}
	for _, check := range checks {
		if err := check(got); err != nil {
			return got, from, err
		}
	}
	if err := f.Sync(); err != nil {
		return got, from, fmt.Errorf("%s: fsync %s: %w", where, path, err)
	}
	if err := f.Close(); err != nil {
		return got, from, fmt.Errorf("%s: close %s: %w", where, path, err)
	}
	return got, from, nil
}
