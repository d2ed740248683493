package registry

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/hashicorp/go-version"
)

// EnsureRequest asks for one plugin of a pipeline.
type EnsureRequest struct {
	Name       string
	Constraint string // from the pipeline config; "" means any version
	LockPath   string // skippr.lock beside the pipeline config
	Offline    bool   // never contact a registry
}

// Ensure is what `skippr sync` calls for each plugin of a pipeline. It returns
// the installed binary's path and sha256:
//
//   - locked, installed, hash matches the lock: reuse it (no network; the
//     hash is read again only when the file changed since its last check,
//     verified.go);
//   - locked, not installed: install exactly the locked version; the
//     registry's sha256 must equal the lock's (ErrLockMismatch otherwise);
//     offline: ErrNotInstalled;
//   - locked version no longer satisfies the constraint: ErrLockMismatch
//     telling the user to run `skippr plugin install` — never a silent upgrade;
//   - installed binary hashes differently from the lock: ErrChecksum;
//   - not locked: resolve, install, record in the lock file.
func (c *Client) Ensure(ctx context.Context, req EnsureRequest) (Installed, error) {
	if err := ValidateName(req.Name); err != nil {
		return Installed{}, err
	}
	cs, err := parseConstraint(req.Constraint)
	if err != nil {
		return Installed{}, fmt.Errorf("plugin %s: %w", req.Name, err)
	}
	if req.LockPath == "" {
		return Installed{}, fmt.Errorf("plugin %s: %w: no lock file path", req.Name, ErrInvalid)
	}
	lock, err := ReadLock(req.LockPath)
	if err != nil {
		return Installed{}, err
	}
	e, locked := lock.Plugins[req.Name]
	if !locked {
		if req.Offline {
			return Installed{}, fmt.Errorf("plugin %s: %w: it is not in %s and --offline is set", req.Name, ErrNotInstalled, req.LockPath)
		}
		return c.Install(ctx, req.Name, req.Constraint, req.LockPath)
	}

	v, err := version.NewVersion(e.Version)
	if err != nil {
		return Installed{}, fmt.Errorf("lock file %s: plugin %s: %w: %v", req.LockPath, req.Name, ErrInvalid, err)
	}
	if strings.TrimSpace(req.Constraint) != "" && !cs.Check(v) {
		return Installed{}, fmt.Errorf("%w: plugin %s: %s pins version %s, which does not satisfy the constraint %q in the config; run `skippr plugin install '%s@%s'` to upgrade explicitly",
			ErrLockMismatch, req.Name, req.LockPath, e.Version, req.Constraint, req.Name, req.Constraint)
	}
	if !intersects(e.ProtocolVersions, c.opts.Protocols) {
		return Installed{}, fmt.Errorf("%w: plugin %s %s (pinned in %s) speaks protocol %v, this engine speaks %v; %s",
			ErrIncompatible, req.Name, e.Version, req.LockPath, e.ProtocolVersions, c.opts.Protocols, c.UpgradeHint(ctx, req.Name, req.Offline))
	}
	pk := c.opts.Platform.String()
	want, ok := e.SHA256[pk]
	if !ok {
		return Installed{}, fmt.Errorf("%w: plugin %s %s (pinned in %s) has no build for %s",
			ErrNotFound, req.Name, e.Version, req.LockPath, pk)
	}

	path := PluginPath(c.opts.Home, req.Name, e.Version)
	switch id, err := VerifyInstalled(path, want); {
	case err == nil:
		if e.Constraint != req.Constraint {
			// Same version, reworded constraint: keep the lock truthful.
			e.Constraint = req.Constraint
			if err := c.updateLock(req.LockPath, req.Name, e); err != nil {
				return Installed{}, err
			}
		}
		return Installed{Name: req.Name, Version: e.Version, Path: path, SHA256: want, Registry: e.Registry, File: id}, nil
	case errors.Is(err, ErrChecksum):
		return Installed{}, fmt.Errorf("plugin %s %s: the installed binary does not match %s: %w; remove it with `skippr plugin remove %s@%s` and sync again",
			req.Name, e.Version, req.LockPath, err, req.Name, e.Version)
	case !errors.Is(err, fs.ErrNotExist):
		return Installed{}, err
	}
	if req.Offline {
		return Installed{}, fmt.Errorf("plugin %s %s is %w and --offline is set", req.Name, e.Version, ErrNotInstalled)
	}
	return c.installLocked(ctx, req.Name, e)
}

// installLocked installs exactly the locked version. Because the lock pins the
// bytes, any trusted registry that lists the version with the locked hashes
// will do: the locked registry first, then the others in order (an air-gapped
// machine trusts only a mirror). A registry that lists the version with other
// hashes stops the install: that is a republished version, never accepted
// silently.
func (c *Client) installLocked(ctx context.Context, name string, e LockedPlugin) (Installed, error) {
	order := []Registry{}
	if r, ok := c.registry(e.Registry); ok {
		order = append(order, r)
	}
	order = MergeRegistries(order, c.opts.Registries)
	if len(order) == 0 {
		return Installed{}, fmt.Errorf("plugin %s %s: %w: no trusted registry to install it from (locked from %s)", name, e.Version, ErrNotFound, e.Registry)
	}
	var errs []error
	for _, r := range order {
		si, err := c.Index(ctx, r.URL)
		if err != nil {
			if errors.Is(err, ErrSignature) || errors.Is(err, ErrInvalid) {
				return Installed{}, fmt.Errorf("plugin %s %s: %w", name, e.Version, err)
			}
			errs = append(errs, err)
			continue
		}
		p := si.Plugins[name]
		if p == nil || p.Versions[e.Version] == nil {
			errs = append(errs, fmt.Errorf("registry %s: %w: it does not list %s %s", r.URL, ErrNotFound, name, e.Version))
			continue
		}
		rel := p.Versions[e.Version]
		for pk, sum := range e.SHA256 {
			if a, ok := rel.Platforms[pk]; ok && a.SHA256 != sum {
				return Installed{}, fmt.Errorf("%w: plugin %s %s for %s: registry %s lists sha256 %s, skippr.lock pins %s; the version was republished with other bytes — refusing to install it",
					ErrLockMismatch, name, e.Version, pk, r.URL, a.SHA256, sum)
			}
		}
		if rel.Yanked != "" {
			c.opts.Log.Warn("installing a yanked plugin version because skippr.lock pins it",
				"plugin", name, "version", e.Version, "reason", rel.Yanked, "registry", r.URL)
		}
		return c.installRelease(ctx, si, name, e.Version, rel, e.SHA256[c.opts.Platform.String()])
	}
	return Installed{}, fmt.Errorf("plugin %s %s (pinned in the lock file, from %s): %w", name, e.Version, e.Registry, errors.Join(errs...))
}
