package registry

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/hashicorp/go-version"
)

// ListInstalled returns the plugins installed under home, sorted by name and
// then newest version first, each with the sha256 of its binary as it is on
// disk now. Temp directories of installs in progress are not listed.
func ListInstalled(home string) ([]Installed, error) {
	root := filepath.Join(home, pluginsDir)
	names, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list plugins: %w", err)
	}
	var out []Installed
	for _, n := range names {
		if !n.IsDir() || ValidateName(n.Name()) != nil {
			continue
		}
		vers, err := os.ReadDir(filepath.Join(root, n.Name()))
		if err != nil {
			return nil, fmt.Errorf("list plugins: %w", err)
		}
		var vs []*version.Version
		for _, v := range vers {
			if pv, err := version.NewVersion(v.Name()); err == nil && v.IsDir() && pv.String() == v.Name() {
				vs = append(vs, pv)
			}
		}
		sort.Sort(sort.Reverse(version.Collection(vs)))
		for _, v := range vs {
			p := PluginPath(home, n.Name(), v.String())
			sum, err := HashFile(p)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return nil, err
			}
			out = append(out, Installed{Name: n.Name(), Version: v.String(), Path: p, SHA256: sum})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Remove deletes installed versions of plugin name: one version, or all when
// ver is "". It returns the versions removed; removing nothing is ErrNotFound.
// Each version directory is renamed aside before deletion, so no half-removed
// plugin is ever visible.
func Remove(ctx context.Context, home, name, ver string) ([]string, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	if ver != "" {
		c, err := CanonicalVersion(ver)
		if err != nil {
			return nil, err
		}
		ver = c
	}
	lk, err := lockHome(ctx, home)
	if err != nil {
		return nil, err
	}
	defer lk.unlock()
	plugins := filepath.Join(home, pluginsDir)
	nameDir := filepath.Join(plugins, name)
	var targets []string
	if ver != "" {
		targets = []string{ver}
	} else {
		ents, err := os.ReadDir(nameDir)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("remove %s: %w", name, err)
		}
		for _, e := range ents {
			if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
				targets = append(targets, e.Name())
			}
		}
	}
	var removed []string
	for _, v := range targets {
		dir := filepath.Join(nameDir, v)
		if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		trash, err := os.MkdirTemp(plugins, trashPrefix)
		if err != nil {
			return removed, fmt.Errorf("remove %s %s: %w", name, v, err)
		}
		if err := os.Rename(dir, filepath.Join(trash, "old")); err != nil {
			os.RemoveAll(trash)
			return removed, fmt.Errorf("remove %s %s: %w", name, v, err)
		}
		if err := os.RemoveAll(trash); err != nil {
			return removed, fmt.Errorf("remove %s %s: %w", name, v, err)
		}
		removed = append(removed, v)
	}
	if len(removed) == 0 {
		what := name
		if ver != "" {
			what += " " + ver
		}
		return nil, fmt.Errorf("plugin %s: %w: nothing installed in %s", what, ErrNotFound, plugins)
	}
	// Drop the name directory once empty; ignore failure (not empty).
	os.Remove(nameDir)
	if err := syncDir(plugins); err != nil {
		return removed, err
	}
	return removed, nil
}
