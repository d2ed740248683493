package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/skippr-dev/skippr/engine/cmdline"
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
		Name:        "install",
		Usage:       "install a plugin and pin it in skippr.lock",
		ArgsUsage:   "NAME[@CONSTRAINT]",
		Description: helpText("plugin-install"),
		Flags:       registryFlags(),
		Action: func(ctx context.Context, c *cli.Command) error {
			args, err := cmdline.Args(c, 1)
			if err != nil {
				return err
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
		Name:        "list",
		Usage:       "list installed plugins",
		ArgsUsage:   " ",
		Description: helpText("plugin-list"),
		Flags:       []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print JSON for scripts"}},
		Action: func(ctx context.Context, c *cli.Command) error {
			list, err := registry.ListInstalled(g.Home)
			if err != nil {
				return withCode(exitFailure, err)
			}
			lock, err := registry.ReadLock(lockPath(g))
			if err != nil {
				return withCode(exitUsage, err)
			}
			rows := lock.Listed(list)
			if c.Bool("json") {
				return cmdline.WriteJSON(c.Root().Writer, rows)
			}
			if len(rows) == 0 {
				fmt.Fprintf(c.Root().Writer, "no plugins installed in %s\n", g.Home)
				return nil
			}
			return rows.WriteText(c.Root().Writer)
		},
	}
}

func pluginRemoveCommand(g *globals) *cli.Command {
	return &cli.Command{
		Name:        "remove",
		Usage:       "remove installed plugin versions",
		ArgsUsage:   "NAME[@VERSION]",
		Description: helpText("plugin-remove"),
		Action: func(ctx context.Context, c *cli.Command) error {
			args, err := cmdline.Args(c, 1)
			if err != nil {
				return err
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
