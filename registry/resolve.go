package registry

import (
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/go-version"
)

// Resolved is the version Resolve picked for a plugin on one platform.
type Resolved struct {
	Name       string
	Version    string // canonical
	Constraint string // as given
	Release    *Release
	Platform   Platform
	Artifact   Artifact // Release.Platforms[Platform.String()]
}

// parseConstraint parses a go-version constraint; "" means any version.
func parseConstraint(c string) (version.Constraints, error) {
	if strings.TrimSpace(c) == "" {
		c = ">= 0"
	}
	cs, err := version.NewConstraint(c)
	if err != nil {
		return nil, fmt.Errorf("%w: version constraint %q: %v (examples: 1.2.3, ~> 1.2, >= 1, < 2)", ErrInvalid, c, err)
	}
	return cs, nil
}

// exactPin returns the version an "= X" or bare "X" constraint pins.
func exactPin(c string) (*version.Version, bool) {
	s := strings.TrimSpace(c)
	if strings.Contains(s, ",") {
		return nil, false
	}
	s = strings.TrimSpace(strings.TrimPrefix(s, "="))
	v, err := version.NewVersion(s)
	if err != nil {
		return nil, false
	}
	return v, true
}

func intersects(a, b []int) bool {
	for _, x := range a {
		if slices.Contains(b, x) {
			return true
		}
	}
	return false
}

// Resolve picks the newest version of plugin name that satisfies constraint,
// is not yanked, speaks one of engineProtocols and has a build for platform.
// A yanked version is picked only when the constraint pins exactly that
// version (the caller should warn; Resolved.Release.Yanked says why).
//
// The errors say why nothing fit: an unknown plugin or no version matching
// (ErrNotFound, listing the available versions), or matching versions whose
// protocols the engine does not speak (ErrIncompatible, naming the newest
// version that would work). Resolve works on the index alone, so protocol
// mismatches are caught before anything is downloaded.
func (ix *Index) Resolve(name, constraint string, engineProtocols []int, platform Platform) (Resolved, error) {
	cs, err := parseConstraint(constraint)
	if err != nil {
		return Resolved{}, fmt.Errorf("plugin %s: %w", name, err)
	}
	if len(engineProtocols) == 0 {
		return Resolved{}, fmt.Errorf("plugin %s: %w: the engine's protocol versions are not set", name, ErrInvalid)
	}
	p := ix.Plugins[name]
	if p == nil || len(p.Versions) == 0 {
		return Resolved{}, fmt.Errorf("%w: plugin %q is not in this registry%s", ErrNotFound, name, suggest(ix, name))
	}
	pin, pinned := exactPin(constraint)
	pk := platform.String()

	// works reports why a version cannot be used, ignoring the constraint.
	works := func(v *version.Version, allowYanked bool) string {
		r := p.Versions[v.String()]
		switch {
		case r.Yanked != "" && !allowYanked:
			return "yanked: " + r.Yanked
		case !intersects(r.ProtocolVersions, engineProtocols):
			return fmt.Sprintf("speaks protocol %v, the engine speaks %v", r.ProtocolVersions, engineProtocols)
		}
		if _, ok := r.Platforms[pk]; !ok {
			return fmt.Sprintf("no build for %s (built for %s)", pk, strings.Join(r.PlatformKeys(), ", "))
		}
		return ""
	}

	var rejected []string
	incompatible := false
	for _, v := range p.sortedVersions() {
		if !cs.Check(v) {
			continue
		}
		r := p.Versions[v.String()]
		why := works(v, pinned && v.Equal(pin))
		if why == "" {
			return Resolved{
				Name: name, Version: v.String(), Constraint: constraint,
				Release: r, Platform: platform, Artifact: r.Platforms[pk],
			}, nil
		}
		if r.Yanked == "" && !intersects(r.ProtocolVersions, engineProtocols) {
			incompatible = true
		}
		rejected = append(rejected, v.String()+" ("+why+")")
	}

	avail := availableVersions(p)
	if len(rejected) == 0 {
		return Resolved{}, fmt.Errorf("%w: plugin %s: no version matches %q; available: %s", ErrNotFound, name, constraintText(constraint), avail)
	}
	newest := "none"
	for _, v := range p.sortedVersions() {
		if works(v, false) == "" {
			newest = v.String()
			break
		}
	}
	msg := fmt.Sprintf("plugin %s: no usable version matches %q on %s: %s; newest version that works with this engine and platform: %s; available: %s",
		name, constraintText(constraint), pk, strings.Join(rejected, "; "), newest, avail)
	if incompatible {
		return Resolved{}, fmt.Errorf("%w: %s", ErrIncompatible, msg)
	}
	return Resolved{}, fmt.Errorf("%w: %s", ErrNotFound, msg)
}

func constraintText(c string) string {
	if strings.TrimSpace(c) == "" {
		return "any"
	}
	return c
}

// availableVersions lists versions newest first, marking yanked ones.
func availableVersions(p *Plugin) string {
	var out []string
	for _, v := range p.VersionsNewestFirst() {
		if p.Versions[v].Yanked != "" {
			v += " (yanked)"
		}
		out = append(out, v)
	}
	return strings.Join(out, ", ")
}

// suggest names the plugins the registry does have, to catch typos.
func suggest(ix *Index, name string) string {
	var names []string
	for n := range ix.Plugins {
		names = append(names, n)
	}
	if len(names) == 0 {
		return " (it lists no plugins)"
	}
	slices.Sort(names)
	if len(names) > 20 {
		names = append(names[:20], "…")
	}
	return " (it lists: " + strings.Join(names, ", ") + ")"
}
