package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/skippr-dev/skippr/registry"
)

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
	return newRegistryClient(c, g, regs)
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
// runCLI() already prefixes errors with "skippr: ".
func cmdName(c *cli.Command) string {
	return strings.TrimPrefix(c.FullName(), c.Root().Name+" ")
}
