package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v3"

	"github.com/skippr-dev/skippr/engine/pluginhost"
	"github.com/skippr-dev/skippr/registry"
)

// pluginCommand is `skippr plugin`: install, list, remove, inspect and mirror plugins.
func pluginCommand(g *globals) *cli.Command {
	return &cli.Command{
		Name:  "plugin",
		Usage: "install, list, remove, inspect and mirror plugins",
		Description: `Plugins are binaries published in registries: static folders (file://, http(s)://, s3://) holding a
signed index.json. skippr installs them under $SKIPPR_HOME/plugins/<name>/<version>/ after checking the index
signature against the registry's trusted keys and each binary's size and sha256 against the index.

Registries are tried in order: those given with --registry, otherwise the config's, then the ones trusted with
` + "`skippr registry trust`" + `, then the project's own (` + registry.DefaultRegistryURL + `), which is asked only
when none of those answered. A registry that lacks the plugin but lists a close name stops the search ("did you mean").
skippr.lock (beside the config) pins the exact version and the sha256 of every platform.`,
		Commands: []*cli.Command{
			pluginInstallCommand(g),
			pluginListCommand(g),
			pluginRemoveCommand(g),
			pluginInfoCommand(g),
			pluginMirrorCommand(g),
		},
	}
}

// registryFlags choose registries for one command instead of the configured ones.
func registryFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringSliceFlag{Name: "registry", Usage: "registry URL to use instead of the configured ones (repeatable)"},
		&cli.StringSliceFlag{Name: "key", Usage: "public key file trusted for the --registry URLs (repeatable); default: their keys from the trust store or config"},
	}
}

func pluginInstallCommand(g *globals) *cli.Command {
	return &cli.Command{
		Name:      "install",
		Usage:     "install a plugin and pin it in skippr.lock",
		ArgsUsage: "NAME[@CONSTRAINT]",
		Description: `Resolves CONSTRAINT (default: any) to the newest version that is not yanked, speaks a protocol this
engine speaks and has a build for this platform; downloads, verifies and installs it. Yanked versions are
used only when the constraint pins them exactly. Constraints: 1.2.3, ~> 1.2, ">= 1, < 2".

When the config or skippr.lock exists, the choice is recorded in skippr.lock, replacing any previous pin:
this is how a pinned plugin is upgraded.

  skippr plugin install postgres
  skippr plugin install 'postgres@~> 1.2'
  skippr plugin install echo@1.0.0 --registry https://example.com/reg --key example.pub`,
		Flags: registryFlags(),
		Action: func(ctx context.Context, c *cli.Command) error {
			args := c.Args().Slice()
			if len(args) != 1 {
				return withCode(exitUsage, fmt.Errorf("plugin install: want NAME[@CONSTRAINT], got %d arguments", len(args)))
			}
			name, constraint, _ := strings.Cut(args[0], "@")
			rc, err := pluginClient(c, g)
			if err != nil {
				return err
			}
			lp := ""
			if pathExists(g.ConfigPath) || pathExists(lockPath(g)) {
				lp = lockPath(g)
			}
			inst, err := rc.Install(ctx, name, constraint, lp)
			if err != nil {
				return withCode(registryExitCode(err), err)
			}
			fmt.Fprintf(c.Root().Writer, "installed %s %s from %s\n  %s\n  sha256 %s\n", inst.Name, inst.Version, inst.Registry, inst.Path, inst.SHA256)
			if lp != "" {
				fmt.Fprintf(c.Root().Writer, "pinned in %s\n", lp)
			}
			return nil
		},
	}
}

func pluginListCommand(g *globals) *cli.Command {
	return &cli.Command{
		Name:      "list",
		Usage:     "list installed plugins",
		ArgsUsage: " ",
		Description: `Lists the plugins under $SKIPPR_HOME/plugins with the sha256 of each binary as it is on disk now, and
whether skippr.lock pins that version.`,
		Flags: []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print JSON for scripts"}},
		Action: func(ctx context.Context, c *cli.Command) error {
			list, err := registry.ListInstalled(g.Home)
			if err != nil {
				return withCode(exitFailure, err)
			}
			lock, err := registry.ReadLock(lockPath(g))
			if err != nil {
				return withCode(exitUsage, err)
			}
			type row struct {
				registry.Installed
				Locked bool `json:"locked"`
			}
			rows := make([]row, 0, len(list))
			for _, p := range list {
				e, ok := lock.Plugins[p.Name]
				rows = append(rows, row{Installed: p, Locked: ok && e.Version == p.Version})
			}
			if c.Bool("json") {
				enc := json.NewEncoder(c.Root().Writer)
				enc.SetIndent("", "  ")
				return enc.Encode(rows)
			}
			if len(rows) == 0 {
				fmt.Fprintf(c.Root().Writer, "no plugins installed in %s\n", g.Home)
				return nil
			}
			tw := tabwriter.NewWriter(c.Root().Writer, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tVERSION\tLOCKED\tSHA256\tPATH")
			for _, r := range rows {
				locked := "-"
				if r.Locked {
					locked = "yes"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Name, r.Version, locked, r.SHA256, r.Path)
			}
			return tw.Flush()
		},
	}
}

func pluginRemoveCommand(g *globals) *cli.Command {
	return &cli.Command{
		Name:      "remove",
		Usage:     "remove installed plugin versions",
		ArgsUsage: "NAME[@VERSION]",
		Description: `Removes one installed version, or every installed version of NAME. skippr.lock is not changed: a
pinned version is installed again by the next sync (unless --offline).`,
		Action: func(ctx context.Context, c *cli.Command) error {
			args := c.Args().Slice()
			if len(args) != 1 {
				return withCode(exitUsage, fmt.Errorf("plugin remove: want NAME[@VERSION], got %d arguments", len(args)))
			}
			name, ver, _ := strings.Cut(args[0], "@")
			removed, err := registry.Remove(ctx, g.Home, name, ver)
			if err != nil {
				return withCode(registryExitCode(err), err)
			}
			lock, _ := registry.ReadLock(lockPath(g))
			for _, v := range removed {
				fmt.Fprintf(c.Root().Writer, "removed %s %s\n", name, v)
				if lock != nil && lock.Plugins[name].Version == v {
					fmt.Fprintf(c.Root().Writer, "  %s still pins it; the next sync installs it again\n", lockPath(g))
				}
			}
			return nil
		},
	}
}

func pluginInfoCommand(g *globals) *cli.Command {
	return &cli.Command{
		Name:      "info",
		Usage:     "show a plugin's versions in the registry",
		ArgsUsage: "NAME",
		Description: `Shows, from the first registry that lists NAME, every version with its protocol versions, kind,
platforms and yank reason, after verifying the index signature.`,
		Flags: append(registryFlags(), &cli.BoolFlag{Name: "json", Usage: "print JSON for scripts"}),
		Action: func(ctx context.Context, c *cli.Command) error {
			args := c.Args().Slice()
			if len(args) != 1 {
				return withCode(exitUsage, fmt.Errorf("plugin info: want NAME, got %d arguments", len(args)))
			}
			name := args[0]
			rc, err := pluginClient(c, g)
			if err != nil {
				return err
			}
			si, err := rc.Find(ctx, name)
			if err != nil {
				return withCode(registryExitCode(err), err)
			}
			p := si.Plugins[name]
			type ver struct {
				Version          string   `json:"version"`
				ProtocolVersions []int    `json:"protocol_versions"`
				Kind             string   `json:"kind"`
				Platforms        []string `json:"platforms"`
				Yanked           string   `json:"yanked,omitempty"`
			}
			out := struct {
				Name     string `json:"name"`
				Registry string `json:"registry"`
				KeyID    string `json:"key_id"`
				Versions []ver  `json:"versions"`
			}{Name: name, Registry: si.Registry.URL, KeyID: si.KeyID}
			for _, v := range p.VersionsNewestFirst() {
				r := p.Versions[v]
				out.Versions = append(out.Versions, ver{v, r.ProtocolVersions, r.Kind, r.PlatformKeys(), r.Yanked})
			}
			if c.Bool("json") {
				enc := json.NewEncoder(c.Root().Writer)
				enc.SetIndent("", "  ")
				return enc.Encode(out)
			}
			fmt.Fprintf(c.Root().Writer, "%s in %s (index signed by key %s); this engine speaks protocol %v\n\n", name, out.Registry, out.KeyID, pluginhost.Protocols)
			tw := tabwriter.NewWriter(c.Root().Writer, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "VERSION\tPROTOCOLS\tKIND\tPLATFORMS\tYANKED")
			for _, v := range out.Versions {
				y := "-"
				if v.Yanked != "" {
					y = v.Yanked
				}
				fmt.Fprintf(tw, "%s\t%v\t%s\t%s\t%s\n", v.Version, v.ProtocolVersions, v.Kind, strings.Join(v.Platforms, " "), y)
			}
			return tw.Flush()
		},
	}
}

func pluginMirrorCommand(g *globals) *cli.Command {
	return &cli.Command{
		Name:      "mirror",
		Usage:     "copy the pinned plugins and the signed index into a folder, for air-gapped machines",
		ArgsUsage: "DIR",
		Description: `Copies, for every version pinned in skippr.lock, the binaries of all platforms, plus the registry's
signed index.json and index.json.sig verbatim, into DIR. DIR is then a file:// registry. On the target machine:

  skippr registry trust file:///path/to/DIR --key REGISTRY.pub
  skippr sync --offline   # after a first sync installed the plugins from the mirror

With plugins from several registries each gets a subfolder of DIR.`,
		Flags: registryFlags(),
		Action: func(ctx context.Context, c *cli.Command) error {
			args := c.Args().Slice()
			if len(args) != 1 {
				return withCode(exitUsage, fmt.Errorf("plugin mirror: want DIR, got %d arguments", len(args)))
			}
			rc, err := pluginClient(c, g)
			if err != nil {
				return err
			}
			ms, err := rc.Mirror(ctx, lockPath(g), args[0])
			if err != nil {
				return withCode(registryExitCode(err), err)
			}
			for _, m := range ms {
				fmt.Fprintf(c.Root().Writer, "mirrored %s into %s: %s\n", m.From, m.Dir, strings.Join(m.Plugins, ", "))
			}
			return nil
		},
	}
}

// pluginClient builds a registry client for a plugin command: the --registry
// URLs when given, else the config's registries, the trust store and the
// project's registry, in that order.
func pluginClient(c *cli.Command, g *globals) (*registry.Client, error) {
	var known []registry.Registry
	if pathExists(g.ConfigPath) {
		cfg, err := loadConfig(g)
		if err != nil {
			return nil, err
		}
		if known, err = configRegistries(cfg); err != nil {
			return nil, err
		}
	}
	known, err := registry.Sources(g.Home, known)
	if err != nil {
		return nil, withCode(exitUsage, err)
	}

	var keys []registry.PublicKey
	for _, f := range c.StringSlice("key") {
		k, err := registry.ReadPublicKeyFile(f)
		if err != nil {
			return nil, withCode(exitUsage, fmt.Errorf("--key: %w", err))
		}
		keys = append(keys, k)
	}
	regs := known
	if urls := c.StringSlice("registry"); len(urls) > 0 {
		regs = nil
		for _, u := range urls {
			n, err := registry.NormalizeURL(u)
			if err != nil {
				return nil, withCode(exitUsage, fmt.Errorf("--registry: %w", err))
			}
			r := registry.Registry{URL: n, Keys: keys}
			if len(keys) == 0 {
				for _, k := range known {
					if k.URL == n {
						r.Keys = k.Keys
					}
				}
			}
			if len(r.Keys) == 0 {
				return nil, withCode(exitUsage, fmt.Errorf("--registry %s: no trusted key for it; pass --key PUBFILE or run `skippr registry trust %s --key PUBFILE`", n, n))
			}
			regs = append(regs, r)
		}
	} else if len(keys) > 0 {
		return nil, withCode(exitUsage, errors.New("--key applies to --registry URLs; give --registry too"))
	}
	rc, err := registry.New(registry.Options{
		Home:        g.Home,
		Registries:  regs,
		Protocols:   pluginhost.Protocols,
		Progress:    c.Root().ErrWriter,
		ProgressTTY: isTerminal(c.Root().ErrWriter),
		Log:         g.Log,
	})
	if err != nil {
		return nil, withCode(exitUsage, err)
	}
	return rc, nil
}

func pathExists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, fs.ErrNotExist)
}

// requireFlags stands in for cli's Required flags: it names every missing flag at once and
// exits with the usage code.
func requireFlags(c *cli.Command, names ...string) error {
	var missing []string
	for _, n := range names {
		if !c.IsSet(n) {
			missing = append(missing, "--"+n)
		}
	}
	if len(missing) > 0 {
		return withCode(exitUsage, fmt.Errorf("%s: missing %s (see --help)", cmdName(c), strings.Join(missing, ", ")))
	}
	return nil
}

// cmdName is the command path without the program name ("registry sign"):
// run() already prefixes errors with "skippr: ".
func cmdName(c *cli.Command) string {
	return strings.TrimPrefix(c.FullName(), c.Root().Name+" ")
}
