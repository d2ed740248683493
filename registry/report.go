package registry

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Choose returns the registries one command uses: the urls when given (each trusted with keys, or, when keys
// is empty, with the keys known for that URL), otherwise known. The errors name the flags `skippr plugin`
// takes them from: every one is a usage error.
func Choose(known []Registry, urls []string, keys []PublicKey) ([]Registry, error) {
	if len(urls) == 0 {
		if len(keys) > 0 {
			return nil, errors.New("--key applies to --registry URLs; give --registry too")
		}
		return known, nil
	}
	var regs []Registry
	for _, u := range urls {
		n, err := NormalizeURL(u)
		if err != nil {
			return nil, fmt.Errorf("--registry: %w", err)
		}
		r := Registry{URL: n, Keys: keys}
		if len(keys) == 0 {
			for _, k := range known {
				if k.URL == n {
					r.Keys = k.Keys
				}
			}
		}
		if len(r.Keys) == 0 {
			return nil, fmt.Errorf("--registry %s: no trusted key for it; pass --key PUBFILE or run `skippr registry trust %s --key PUBFILE`", n, n)
		}
		regs = append(regs, r)
	}
	return regs, nil
}

// Pick returns the registries one plugin command uses: urls trusted with the keys in keyFiles (the --registry
// and --key flags) when given, otherwise those of Sources(home, fromConfig). Every error is a usage error.
func Pick(home string, fromConfig []Registry, urls, keyFiles []string) ([]Registry, error) {
	known, err := Sources(home, fromConfig)
	if err != nil {
		return nil, err
	}
	keys, err := ReadPublicKeyFiles(keyFiles)
	if err != nil {
		return nil, fmt.Errorf("--key: %w", err)
	}
	return Choose(known, urls, keys)
}

// ReadPublicKeyFiles reads the public key of each file, in order.
func ReadPublicKeyFiles(paths []string) ([]PublicKey, error) {
	var keys []PublicKey
	for _, f := range paths {
		k, err := ReadPublicKeyFile(f)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// ListedPlugin is an installed plugin version and whether the lock file pins that version.
type ListedPlugin struct {
	Installed
	Locked bool `json:"locked"`
}

// Listed marks which of the installed versions the lock pins (`skippr plugin list`).
func (l *Lock) Listed(installed []Installed) ListedPlugins {
	rows := make(ListedPlugins, 0, len(installed))
	for _, p := range installed {
		e, ok := l.Plugins[p.Name]
		rows = append(rows, ListedPlugin{Installed: p, Locked: ok && e.Version == p.Version})
	}
	return rows
}

// ListedPlugins is what `skippr plugin list` prints.
type ListedPlugins []ListedPlugin

// WriteText prints one row per installed version.
func (rows ListedPlugins) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tVERSION\tLOCKED\tSHA256\tPATH")
	for _, r := range rows {
		locked := "-"
		if r.Locked {
			locked = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Name, r.Version, locked, r.SHA256, r.Path)
	}
	return tw.Flush()
}

// PluginVersions is one plugin's versions in one registry's index (`skippr plugin info`).
type PluginVersions struct {
	Name     string        `json:"name"`
	Registry string        `json:"registry"`
	KeyID    string        `json:"key_id"`
	Versions []VersionInfo `json:"versions"`
}

// VersionInfo is one published version of a plugin.
type VersionInfo struct {
	Version          string   `json:"version"`
	ProtocolVersions []int    `json:"protocol_versions"`
	Kind             string   `json:"kind"`
	Platforms        []string `json:"platforms"`
	Yanked           string   `json:"yanked,omitempty"`
}

// Info describes plugin name as si lists it, newest version first.
func (si *SignedIndex) Info(name string) PluginVersions {
	out := PluginVersions{Name: name, Registry: si.Registry.URL, KeyID: si.KeyID}
	p := si.Plugins[name]
	if p == nil {
		return out
	}
	for _, v := range p.VersionsNewestFirst() {
		r := p.Versions[v]
		out.Versions = append(out.Versions, VersionInfo{v, r.ProtocolVersions, r.Kind, r.PlatformKeys(), r.Yanked})
	}
	return out
}

// WriteText prints where the index came from, then one row per version; protocols are the engine's own, for
// the reader to compare.
func (in PluginVersions) WriteText(w io.Writer, protocols []int) error {
	fmt.Fprintf(w, "%s in %s (index signed by key %s); this engine speaks protocol %v\n\n", in.Name, in.Registry, in.KeyID, protocols)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tPROTOCOLS\tKIND\tPLATFORMS\tYANKED")
	for _, v := range in.Versions {
		y := "-"
		if v.Yanked != "" {
			y = v.Yanked
		}
		fmt.Fprintf(tw, "%s\t%v\t%s\t%s\t%s\n", v.Version, v.ProtocolVersions, v.Kind, strings.Join(v.Platforms, " "), y)
	}
	return tw.Flush()
}
