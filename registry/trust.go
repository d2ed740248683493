package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// Registry is a registry the user trusts: its base URL and the public keys
// that may sign its index. An index signed by any other key is refused.
type Registry struct {
	URL  string      `json:"url"`
	Keys []PublicKey `json:"keys"`
	// Fallback marks a registry the user did not name (the project's own, added after
	// theirs): it is asked only when no registry before it answered, so a plugin missing
	// from the user's registries fails there instead of at a network lookup they never
	// asked for.
	Fallback bool `json:"-"`
}

// KeyIDs are the ids of r's keys, in order (what `skippr registry trust` prints).
func (r Registry) KeyIDs() []string {
	ids := make([]string, len(r.Keys))
	for i, k := range r.Keys {
		ids[i] = k.ID()
	}
	return ids
}

// TrustFile is the trust store's name under $SKIPPR_HOME.
const TrustFile = "trust.json"

type trustStore struct {
	Format     int        `json:"format"`
	Registries []Registry `json:"registries"`
}

// ReadTrustStore returns the registries recorded in $SKIPPR_HOME/trust.json
// by `skippr registry trust`, in the order they were first trusted. A missing
// file is an empty store.
func ReadTrustStore(home string) ([]Registry, error) {
	p := filepath.Join(home, TrustFile)
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read trust store: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var ts trustStore
	if err := dec.Decode(&ts); err != nil {
		return nil, fmt.Errorf("trust store %s: %w: %v", p, ErrInvalid, err)
	}
	if ts.Format != 1 {
		return nil, fmt.Errorf("trust store %s: %w: format %d, want 1", p, ErrInvalid, ts.Format)
	}
	for i, r := range ts.Registries {
		n, err := NormalizeURL(r.URL)
		if err != nil {
			return nil, fmt.Errorf("trust store %s: %w", p, err)
		}
		ts.Registries[i].URL = n
	}
	return ts.Registries, nil
}

// Trust adds url with keys to $SKIPPR_HOME/trust.json (keys are merged into
// an existing entry) and returns the entry as stored. The file is replaced
// atomically.
func Trust(home, url string, keys ...PublicKey) (Registry, error) {
	if len(keys) == 0 {
		return Registry{}, fmt.Errorf("trust %s: %w: at least one public key is required", url, ErrInvalid)
	}
	n, err := NormalizeURL(url)
	if err != nil {
		return Registry{}, err
	}
	regs, err := ReadTrustStore(home)
	if err != nil {
		return Registry{}, err
	}
	regs = MergeRegistries(regs, []Registry{{URL: n, Keys: keys}})
	b, err := marshalJSON(trustStore{Format: 1, Registries: regs})
	if err != nil {
		return Registry{}, fmt.Errorf("encode trust store: %w", err)
	}
	if err := os.MkdirAll(home, 0o755); err != nil {
		return Registry{}, fmt.Errorf("trust store: %w", err)
	}
	if err := writeFileAtomic(filepath.Join(home, TrustFile), b, 0o644); err != nil {
		return Registry{}, fmt.Errorf("trust store: %w", err)
	}
	for _, r := range regs {
		if r.URL == n {
			return r, nil
		}
	}
	return Registry{}, fmt.Errorf("trust %s: entry vanished after merge", n) // unreachable by construction
}

// MergeRegistries concatenates lists of registries in precedence order,
// folding entries with the same (normalized) URL into the first one and
// uniting their keys. Entries with an invalid URL are kept as given so the
// error surfaces when they are used.
func MergeRegistries(lists ...[]Registry) []Registry {
	var out []Registry
	pos := map[string]int{}
	for _, l := range lists {
		for _, r := range l {
			u, err := NormalizeURL(r.URL)
			if err != nil {
				u = r.URL
			}
			i, ok := pos[u]
			if !ok {
				pos[u] = len(out)
				out = append(out, Registry{URL: u, Keys: slices.Clone(r.Keys), Fallback: r.Fallback})
				continue
			}
			// Named by the user anywhere: asked in its turn like any other.
			out[i].Fallback = out[i].Fallback && r.Fallback
			for _, k := range r.Keys {
				if !slices.ContainsFunc(out[i].Keys, func(e PublicKey) bool { return e.ID() == k.ID() }) {
					out[i].Keys = append(out[i].Keys, k)
				}
			}
		}
	}
	return out
}

// Sources is the order in which registries are asked for a plugin: the config's own (fromConfig), then the
// ones trusted in $SKIPPR_HOME/trust.json, then the project's registry — each URL once, keys united.
func Sources(home string, fromConfig []Registry) ([]Registry, error) {
	trusted, err := ReadTrustStore(home)
	if err != nil {
		return nil, err
	}
	return MergeRegistries(fromConfig, trusted, []Registry{DefaultRegistry()}), nil
}
