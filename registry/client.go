package registry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"

	suggestpkg "github.com/skippr-dev/skippr/internal/suggest"
)

// Size limits for the small files; a registry serving more is broken or hostile.
const (
	maxIndexSize = 64 << 20
	maxSigSize   = 64 << 10
)

// Options configures a Client.
type Options struct {
	// Home is $SKIPPR_HOME; plugins install under Home/plugins.
	Home string
	// Registries are the trusted registries in precedence order: a plugin
	// comes from the first registry whose index lists it.
	Registries []Registry
	// Protocols are the plugin protocol versions the engine speaks.
	Protocols []int
	// Platform to install for; zero means HostPlatform().
	Platform Platform
	// Progress receives a progress bar while binaries download; nil for none.
	Progress io.Writer
	// ProgressTTY says Progress is a terminal: the bar is redrawn in place with
	// carriage returns. Otherwise a line is written per 10%.
	ProgressTTY bool
	// Log receives warnings (yanked versions) and debug messages; nil discards.
	Log *slog.Logger
	// HTTPClient for http(s) registries; nil for a default with timeouts.
	HTTPClient *http.Client
}

// Client installs and verifies plugins. It remembers each registry index it
// fetched and verified, so one `skippr sync` downloads each index once; make
// one Client per command, not per process lifetime. Safe for concurrent use.
type Client struct {
	opts Options

	mu      sync.Mutex
	indexes map[string]*SignedIndex

	lockFileMu sync.Mutex // serializes read-modify-write of lock files
}

// New returns a Client. Registry URLs are normalized; a bad URL is an error.
func New(opts Options) (*Client, error) {
	if opts.Home == "" {
		return nil, fmt.Errorf("%w: registry client: Home ($SKIPPR_HOME) is empty", ErrInvalid)
	}
	if opts.Platform == (Platform{}) {
		opts.Platform = HostPlatform()
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	for _, r := range opts.Registries {
		if _, err := NormalizeURL(r.URL); err != nil {
			return nil, err
		}
	}
	opts.Registries = MergeRegistries(opts.Registries)
	return &Client{opts: opts, indexes: map[string]*SignedIndex{}}, nil
}

// SignedIndex is a registry index whose signature verified with a trusted key.
type SignedIndex struct {
	*Index
	Registry Registry // the trusted entry it was fetched with
	KeyID    string   // the key whose signature verified
	Raw      []byte   // index.json exactly as served
	RawSig   []byte   // index.json.sig exactly as served
	src      Source
}

// registry returns the trusted entry for url, or false.
func (c *Client) registry(url string) (Registry, bool) {
	n, err := NormalizeURL(url)
	if err != nil {
		return Registry{}, false
	}
	for _, r := range c.opts.Registries {
		if r.URL == n {
			return r, true
		}
	}
	return Registry{}, false
}

func (c *Client) sourceOptions() SourceOptions { return SourceOptions{HTTPClient: c.opts.HTTPClient} }

// FetchIndex downloads index.json and index.json.sig from reg, verifies the
// signature against reg.Keys and parses the index. Nothing unverified is
// parsed beyond the signature file.
func FetchIndex(ctx context.Context, reg Registry, opts SourceOptions) (*SignedIndex, error) {
	src, err := NewSource(reg.URL, opts)
	if err != nil {
		return nil, err
	}
	raw, err := readSmall(ctx, src, "index.json", maxIndexSize)
	if err != nil {
		return nil, fmt.Errorf("registry %s: %w", src.URL(), err)
	}
	sig, err := readSmall(ctx, src, "index.json.sig", maxSigSize)
	if errors.Is(err, ErrNotFound) {
		return nil, fmt.Errorf("registry %s: %w: index.json.sig is missing (unsigned registry; the publisher must run `skippr registry sign`)", src.URL(), ErrSignature)
	}
	if err != nil {
		return nil, fmt.Errorf("registry %s: %w", src.URL(), err)
	}
	id, err := verifyIndexSignature(src.URL(), raw, sig, reg.Keys)
	if err != nil {
		return nil, err
	}
	ix, err := ParseIndex(raw)
	if err != nil {
		return nil, fmt.Errorf("registry %s: %w", src.URL(), err)
	}
	return &SignedIndex{Index: ix, Registry: reg, KeyID: id, Raw: raw, RawSig: sig, src: src}, nil
}

func readSmall(ctx context.Context, src Source, rel string, limit int64) ([]byte, error) {
	rc, size, err := src.Open(ctx, rel)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	if size > limit {
		return nil, fmt.Errorf("%s: %w: %d bytes, more than the %d allowed", rel, ErrInvalid, size, limit)
	}
	b, err := io.ReadAll(io.LimitReader(rc, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: %w: more than the %d bytes allowed", rel, ErrInvalid, limit)
	}
	return b, nil
}

// Index returns the verified index of the trusted registry at url, fetching
// it on first use.
func (c *Client) Index(ctx context.Context, url string) (*SignedIndex, error) {
	reg, ok := c.registry(url)
	if !ok {
		return nil, fmt.Errorf("registry %s: %w: not a trusted registry; run `skippr registry trust %s --key PUBFILE`", url, ErrSignature, url)
	}
	c.mu.Lock()
	si := c.indexes[reg.URL]
	c.mu.Unlock()
	if si != nil {
		return si, nil
	}
	si, err := FetchIndex(ctx, reg, c.sourceOptions())
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.indexes[reg.URL] = si
	c.mu.Unlock()
	return si, nil
}

// Find returns the index of the first registry (in precedence order) that
// lists plugin name. It stops at the first registry that cannot be fetched or
// verified rather than skipping it: a later registry must not silently supply
// a plugin that an earlier, temporarily unreachable one publishes. It also stops
// at a registry that lacks name but lists a close one (a typo: "did you mean"),
// and asks a Fallback registry only when none before it answered.
func (c *Client) Find(ctx context.Context, name string) (*SignedIndex, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	if len(c.opts.Registries) == 0 {
		return nil, fmt.Errorf("plugin %s: %w: no registry configured; pass --registry URL --key PUBFILE or run `skippr registry trust`", name, ErrNotFound)
	}
	var searched, skipped, listed []string
	for _, r := range c.opts.Registries {
		if r.Fallback && len(searched) > 0 {
			skipped = append(skipped, r.URL)
			continue
		}
		si, err := c.Index(ctx, r.URL)
		if err != nil {
			if len(searched) > 0 {
				return nil, fmt.Errorf("plugin %s: not in %s, then: %w", name, strings.Join(searched, ", "), err)
			}
			return nil, fmt.Errorf("plugin %s: %w", name, err)
		}
		if p := si.Plugins[name]; p != nil && len(p.Versions) > 0 {
			return si, nil
		}
		names := si.pluginNames()
		if s := suggestpkg.Closest(name, names); s != "" {
			return nil, fmt.Errorf("%w: no plugin %s in %s; did you mean %s?", ErrNotFound, name, r.URL, s)
		}
		searched = append(searched, r.URL)
		listed = append(listed, names...)
	}
	msg := fmt.Sprintf("no plugin %s in %s", name, strings.Join(searched, " or "))
	if len(listed) > 0 {
		slices.Sort(listed)
		msg += " (they list: " + strings.Join(slices.Compact(listed), ", ") + ")"
	}
	if len(skipped) > 0 {
		msg += fmt.Sprintf("; %s was not asked because a configured registry answered (list it under registries: in the config, or trust it with `skippr registry trust`, to use it)", strings.Join(skipped, ", "))
	}
	return nil, fmt.Errorf("%w: %s", ErrNotFound, msg)
}

// pluginNames lists the plugins the index has versions of.
func (ix *Index) pluginNames() []string {
	var names []string
	for n, p := range ix.Plugins {
		if p != nil && len(p.Versions) > 0 {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}

// Resolve finds the registry that lists name and picks a version there (see
// Index.Resolve). A yanked version picked by an exact pin is logged as a warning.
func (c *Client) Resolve(ctx context.Context, name, constraint string) (*SignedIndex, Resolved, error) {
	si, err := c.Find(ctx, name)
	if err != nil {
		return nil, Resolved{}, err
	}
	res, err := si.Resolve(name, constraint, c.opts.Protocols, c.opts.Platform)
	if err != nil {
		return nil, Resolved{}, fmt.Errorf("registry %s: %w", si.Registry.URL, err)
	}
	if res.Release.Yanked != "" {
		c.opts.Log.Warn("installing a yanked plugin version because the constraint pins it",
			"plugin", name, "version", res.Version, "reason", res.Release.Yanked, "registry", si.Registry.URL)
	}
	return si, res, nil
}
