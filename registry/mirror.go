package registry

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Mirrored describes one registry copied by Mirror.
type Mirrored struct {
	From    string   // the registry URL the lock file names
	Dir     string   // the folder now holding its signed index and binaries
	Plugins []string // "name version" of every pinned plugin copied
}

// Mirror copies, for every registry the lock file at lockPath refers to, the
// signed index (verbatim, so its signature stays valid) and the binaries of
// the pinned versions for all platforms into dir. dir then works as a
// file:// registry — trusted with the same public key — on a machine without
// network access. With several registries each gets a subfolder of dir named
// after its URL. Binaries already present with the right hash are kept.
func (c *Client) Mirror(ctx context.Context, lockPath, dir string) ([]Mirrored, error) {
	lock, err := ReadLock(lockPath)
	if err != nil {
		return nil, err
	}
	if len(lock.Plugins) == 0 {
		return nil, fmt.Errorf("mirror: %w: %s pins no plugins (run `skippr sync` or `skippr plugin install` first)", ErrNotFound, lockPath)
	}
	byReg := map[string][]string{}
	for name, e := range lock.Plugins {
		n, _ := NormalizeURL(e.Registry) // validated by ReadLock
		byReg[n] = append(byReg[n], name)
	}
	regs := make([]string, 0, len(byReg))
	for r := range byReg {
		regs = append(regs, r)
	}
	sort.Strings(regs)

	var out []Mirrored
	for _, r := range regs {
		target := dir
		if len(regs) > 1 {
			target = filepath.Join(dir, mirrorDirName(r))
		}
		names := byReg[r]
		sort.Strings(names)
		m, err := c.mirrorOne(ctx, r, target, lock, names)
		if err != nil {
			return out, err
		}
		out = append(out, m)
	}
	return out, nil
}

func (c *Client) mirrorOne(ctx context.Context, regURL, target string, lock *Lock, names []string) (Mirrored, error) {
	si, err := c.Index(ctx, regURL)
	if err != nil {
		return Mirrored{}, fmt.Errorf("mirror: %w", err)
	}
	m := Mirrored{From: regURL, Dir: target}
	// Check everything against the lock before writing anything.
	type job struct {
		name, version, pk string
		art               Artifact
	}
	var jobs []job
	for _, name := range names {
		e := lock.Plugins[name]
		p := si.Plugins[name]
		if p == nil || p.Versions[e.Version] == nil {
			return Mirrored{}, fmt.Errorf("mirror: %w: registry %s no longer lists %s %s pinned in the lock file", ErrNotFound, regURL, name, e.Version)
		}
		rel := p.Versions[e.Version]
		for pk, a := range rel.Platforms {
			if want, ok := e.SHA256[pk]; ok && want != a.SHA256 {
				return Mirrored{}, fmt.Errorf("mirror: %w: %s %s for %s: registry %s lists sha256 %s, the lock file pins %s",
					ErrLockMismatch, name, e.Version, pk, regURL, a.SHA256, want)
			}
			jobs = append(jobs, job{name, e.Version, pk, a})
		}
		m.Plugins = append(m.Plugins, name+" "+e.Version)
	}
	sort.Slice(jobs, func(i, j int) bool {
		return jobs[i].name+jobs[i].version+jobs[i].pk < jobs[j].name+jobs[j].version+jobs[j].pk
	})

	if err := os.MkdirAll(target, 0o755); err != nil {
		return Mirrored{}, fmt.Errorf("mirror: %w", err)
	}
	for _, j := range jobs {
		rel := j.art.URL
		if strings.Contains(rel, "://") {
			rel = blobPath(j.art.SHA256) // see openArtifact
		}
		dst := filepath.Join(target, filepath.FromSlash(rel))
		if VerifyFile(dst, j.art.SHA256) == nil {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return Mirrored{}, fmt.Errorf("mirror: %w", err)
		}
		tmp := filepath.Join(filepath.Dir(dst), "."+filepath.Base(dst)+".tmp-mirror")
		os.Remove(tmp)
		where := fmt.Sprintf("mirror %s %s %s", j.name, j.version, j.pk)
		bar := newProgress(c.opts.Progress, c.opts.ProgressTTY, j.name+" "+j.version+" "+j.pk, j.art.Size)
		if _, _, err := fetchVerified(ctx, si.src, j.art, c.sourceOptions(), tmp, bar, where); err != nil {
			return Mirrored{}, err
		}
		if err := os.Chmod(tmp, 0o755); err != nil {
			os.Remove(tmp)
			return Mirrored{}, fmt.Errorf("%s: %w", where, err)
		}
		if err := os.Rename(tmp, dst); err != nil {
			os.Remove(tmp)
			return Mirrored{}, fmt.Errorf("%s: %w", where, err)
		}
		if err := syncDir(filepath.Dir(dst)); err != nil {
			return Mirrored{}, err
		}
	}
	// The index goes last: a mirror whose index is present is complete.
	if err := writeFileAtomic(filepath.Join(target, SignatureFile), si.RawSig, 0o644); err != nil {
		return Mirrored{}, fmt.Errorf("mirror: %w", err)
	}
	if err := writeFileAtomic(filepath.Join(target, IndexFile), si.Raw, 0o644); err != nil {
		return Mirrored{}, fmt.Errorf("mirror: %w", err)
	}
	return m, nil
}

var unsafeChars = regexp.MustCompile(`[^a-zA-Z0-9._-]+`)

// mirrorDirName turns a registry URL into a folder name, e.g.
// https://plugins.skippr.dev/v1 → plugins.skippr.dev-v1.
func mirrorDirName(raw string) string {
	u, err := url.Parse(raw)
	s := raw
	if err == nil {
		s = u.Host + u.Path
	}
	return strings.Trim(unsafeChars.ReplaceAllString(s, "-"), "-.")
}
