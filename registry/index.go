package registry

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"path"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"

	"github.com/hashicorp/go-version"
)

// IndexFormat is the only index.json format this package reads and writes.
const IndexFormat = 1

// Index is the content of a registry's index.json. See the package doc for
// the format.
type Index struct {
	Format  int                `json:"format"`
	Plugins map[string]*Plugin `json:"plugins"`
}

// Plugin lists the published versions of one plugin, keyed by canonical version.
type Plugin struct {
	Versions map[string]*Release `json:"versions"`
}

// Release is one published version of a plugin.
type Release struct {
	ProtocolVersions []int  `json:"protocol_versions"`
	Kind             string `json:"kind"`
	// Yanked is the reason the version was withdrawn; empty when it was not.
	Yanked    string              `json:"yanked,omitempty"`
	Platforms map[string]Artifact `json:"platforms"`
}

// Artifact is one platform's binary of a release.
type Artifact struct {
	// URL is relative to the registry's base URL, or absolute.
	URL    string `json:"url"`
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
}

// Platform is an operating system and CPU architecture as Go names them.
type Platform struct{ OS, Arch string }

// HostPlatform is the platform this binary runs on.
func HostPlatform() Platform { return Platform{OS: runtime.GOOS, Arch: runtime.GOARCH} }

// String is the index's platform key, "os_arch".
func (p Platform) String() string { return p.OS + "_" + p.Arch }

var (
	nameRE     = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)
	platformRE = regexp.MustCompile(`^[a-z0-9]+_[a-z0-9]+$`)
	kinds      = []string{"source", "destination", "both"}
)

// ValidateName checks a plugin name: lowercase letters, digits, '-' and '_',
// at most 64 characters. Names become directory and file names.
func ValidateName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%w: plugin name %q: want lowercase letters, digits, '-' or '_' (at most 64, starting with a letter or digit)", ErrInvalid, name)
	}
	return nil
}

// CanonicalVersion parses a version ("v1.2", "1.2.0") and returns the form the
// index and the install layout use ("1.2.0").
func CanonicalVersion(v string) (string, error) {
	pv, err := version.NewVersion(v)
	if err != nil {
		return "", fmt.Errorf("%w: version %q: %v", ErrInvalid, v, err)
	}
	return pv.String(), nil
}

// ParsePlatform parses "os_arch".
func ParsePlatform(s string) (Platform, error) {
	if !platformRE.MatchString(s) {
		return Platform{}, fmt.Errorf("%w: platform %q: want os_arch, e.g. linux_amd64", ErrInvalid, s)
	}
	os, arch, _ := strings.Cut(s, "_")
	return Platform{OS: os, Arch: arch}, nil
}

func isSHA256Hex(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil && strings.ToLower(s) == s
}

// ParseIndex parses and validates index.json. Unknown fields are rejected so
// a typo in a hand-edited index is caught by the publisher, not the user.
func ParseIndex(data []byte) (*Index, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var ix Index
	if err := dec.Decode(&ix); err != nil {
		return nil, fmt.Errorf("index.json: %w: %v", ErrInvalid, err)
	}
	if err := ix.validate(); err != nil {
		return nil, fmt.Errorf("index.json: %w", err)
	}
	return &ix, nil
}

func (ix *Index) validate() error {
	if ix.Format != IndexFormat {
		return fmt.Errorf("%w: format %d, this skippr reads format %d", ErrInvalid, ix.Format, IndexFormat)
	}
	for name, p := range ix.Plugins {
		if err := ValidateName(name); err != nil {
			return err
		}
		if p == nil {
			return fmt.Errorf("%w: plugin %s: null entry", ErrInvalid, name)
		}
		for v, r := range p.Versions {
			if err := validateRelease(name, v, r); err != nil {
				return err
			}
		}
	}
	return nil
}

func validateRelease(name, v string, r *Release) error {
	where := fmt.Sprintf("plugin %s version %s", name, v)
	if c, err := CanonicalVersion(v); err != nil {
		return fmt.Errorf("%s: %w", where, err)
	} else if c != v {
		return fmt.Errorf("%w: %s: version key must be canonical %q", ErrInvalid, where, c)
	}
	if r == nil {
		return fmt.Errorf("%w: %s: null entry", ErrInvalid, where)
	}
	if len(r.ProtocolVersions) == 0 {
		return fmt.Errorf("%w: %s: protocol_versions is empty", ErrInvalid, where)
	}
	for _, pv := range r.ProtocolVersions {
		if pv < 1 {
			return fmt.Errorf("%w: %s: protocol version %d is not positive", ErrInvalid, where, pv)
		}
	}
	if !slices.Contains(kinds, r.Kind) {
		return fmt.Errorf("%w: %s: kind %q, want one of %s", ErrInvalid, where, r.Kind, strings.Join(kinds, ", "))
	}
	if len(r.Platforms) == 0 {
		return fmt.Errorf("%w: %s: no platforms", ErrInvalid, where)
	}
	for pk, a := range r.Platforms {
		if _, err := ParsePlatform(pk); err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		if !isSHA256Hex(a.SHA256) {
			return fmt.Errorf("%w: %s %s: sha256 %q is not 64 lowercase hex digits", ErrInvalid, where, pk, a.SHA256)
		}
		if a.Size < 0 {
			return fmt.Errorf("%w: %s %s: negative size %d", ErrInvalid, where, pk, a.Size)
		}
		if err := validateArtifactURL(a.URL); err != nil {
			return fmt.Errorf("%s %s: %w", where, pk, err)
		}
	}
	return nil
}

// validateArtifactURL accepts a clean relative path inside the registry, or an
// absolute http(s), s3 or file URL. The bytes are verified by sha256 whatever
// the URL, but a relative path must not climb out of the registry folder.
func validateArtifactURL(u string) error {
	if u == "" {
		return fmt.Errorf("%w: empty url", ErrInvalid)
	}
	if strings.Contains(u, "://") {
		pu, err := url.Parse(u)
		if err != nil {
			return fmt.Errorf("%w: url %q: %v", ErrInvalid, u, err)
		}
		switch pu.Scheme {
		case "http", "https", "s3", "file":
			return nil
		}
		return fmt.Errorf("%w: url %q: scheme %q not supported", ErrInvalid, u, pu.Scheme)
	}
	return checkRelPath(u)
}

// checkRelPath rejects paths that are absolute, unclean, or leave the base.
func checkRelPath(p string) error {
	if p == "" || strings.HasPrefix(p, "/") || strings.Contains(p, "\\") || path.Clean(p) != p ||
		p == ".." || strings.HasPrefix(p, "../") || strings.Contains(p, "?") || strings.Contains(p, "#") {
		return fmt.Errorf("%w: relative path %q must be clean, without '..', '?' or '#', and not start with '/'", ErrInvalid, p)
	}
	return nil
}

// marshalIndex renders an index the way Add, Sign and Yank write it:
// indented, keys sorted (encoding/json sorts map keys), trailing newline.
func marshalIndex(ix *Index) ([]byte, error) {
	b, err := marshalJSON(ix)
	if err != nil {
		return nil, fmt.Errorf("encode index.json: %w", err)
	}
	return b, nil
}

// sortedVersions returns the plugin's versions, newest first.
func (p *Plugin) sortedVersions() []*version.Version {
	vs := make([]*version.Version, 0, len(p.Versions))
	for k := range p.Versions {
		v, err := version.NewVersion(k)
		if err != nil {
			continue // ParseIndex rejected these already
		}
		vs = append(vs, v)
	}
	sort.Sort(sort.Reverse(version.Collection(vs)))
	return vs
}

// VersionsNewestFirst returns the plugin's canonical versions, newest first.
func (p *Plugin) VersionsNewestFirst() []string {
	vs := p.sortedVersions()
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.String()
	}
	return out
}

// PlatformKeys returns the release's platform keys, sorted.
func (r *Release) PlatformKeys() []string {
	ks := make([]string, 0, len(r.Platforms))
	for k := range r.Platforms {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
