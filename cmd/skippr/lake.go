package main

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"os/exec"

	"github.com/urfave/cli/v2"

	"github.com/skippr-dev/skippr/engine/config"
	"github.com/skippr-dev/skippr/engine/pluginhost"
	"github.com/skippr-dev/skippr/registry"
)

func lakeCommand(g *globals) *cli.Command {
	return &cli.Command{
		Name:  "lake",
		Usage: "maintain Iceberg tables written by skippr",
		Subcommands: []*cli.Command{{
			Name:      "compact",
			Usage:     "rewrite a table's small files, fold its deletes into data files and expire old snapshots",
			ArgsUsage: "TABLE",
			Description: `Runs the iceberg plugin's maintenance on the table of stream TABLE: small data files and every file that
equality deletes apply to are rewritten with the deletes applied, delete files nothing needs are removed,
snapshots older than --expire-older-than (keeping --retain-last) are expired and orphan files older than
--orphans-older-than are deleted. skippr's exactly-once fences (table properties) are untouched. The core
binary does not link Iceberg: this runs the pinned plugin binary, verified like at every start.`,
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "connection", Usage: "the iceberg connection (needed when the config has several)"},
				&cli.StringFlag{Name: "expire-older-than", Value: "24h", Usage: "expire snapshots older than this"},
				&cli.IntFlag{Name: "retain-last", Value: 10, Usage: "snapshots kept whatever their age"},
				&cli.StringFlag{Name: "orphans-older-than", Value: "72h", Usage: "delete unreferenced files older than this"},
				&cli.BoolFlag{Name: "offline", Usage: "never contact a registry"},
			},
			Action: func(c *cli.Context) error {
				args, err := commandArgs(c)
				if err != nil {
					return err
				}
				if len(args) != 1 {
					return withCode(exitUsage, fmt.Errorf("lake compact: want one table (stream) name"))
				}
				cfg, err := loadConfig(g)
				if err != nil {
					return err
				}
				cn, err := icebergConnection(cfg, c.String("connection"))
				if err != nil {
					return err
				}
				host, err := newHost(c, g, cfg, c.Bool("offline"))
				if err != nil {
					return err
				}
				bin, err := verifiedBinary(c, host, hostConnection(cn))
				if err != nil {
					return err
				}
				settings, err := cn.SettingsJSON()
				if err != nil {
					return withCode(exitUsage, err)
				}
				cmd := exec.CommandContext(c.Context, bin, "compact",
					"-expire-older-than", c.String("expire-older-than"),
					"-retain-last", fmt.Sprint(c.Int("retain-last")),
					"-orphans-older-than", c.String("orphans-older-than"),
					args[0])
				// Settings (secrets included) go on stdin, never in argv.
				cmd.Stdin = bytes.NewReader(settings)
				cmd.Stdout, cmd.Stderr = c.App.Writer, c.App.ErrWriter
				cmd.Env = pluginhost.Env()
				if err := cmd.Run(); err != nil {
					return fmt.Errorf("lake compact %s: %w", args[0], err)
				}
				return nil
			},
		}},
	}
}

// verifiedBinary resolves a connection's plugin (installing it if needed) and verifies the file against its
// pin, as a start through the plugin host would: for subcommands run outside the plugin protocol.
func verifiedBinary(c *cli.Context, host *pluginhost.Host, conn pluginhost.Connection) (string, error) {
	bin, err := host.Resolve(c.Context, conn)
	if err != nil {
		return "", withCode(registryExitCode(err), err)
	}
	if bin.SHA256 != nil {
		if err := registry.VerifyFile(bin.Path, hex.EncodeToString(bin.SHA256)); err != nil {
			return "", withCode(exitVerify, fmt.Errorf("connection %s: refusing to run plugin %s: %w", conn.Name, conn.Plugin, err))
		}
	}
	return bin.Path, nil
}

// icebergConnection picks the config's iceberg connection: the named one, or the only one.
func icebergConnection(cfg *config.Config, name string) (*config.Connection, error) {
	if name != "" {
		cn, ok := cfg.Connection(name)
		if !ok {
			return nil, withCode(exitUsage, fmt.Errorf("no connection %q in %s (known: %v)", name, cfg.Path, cfg.ConnectionNames()))
		}
		return cn, nil
	}
	var found []*config.Connection
	for _, cn := range cfg.Connections {
		if cn.Plugin == "iceberg" {
			found = append(found, cn)
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return nil, withCode(exitUsage, fmt.Errorf("%s has no connection with plugin iceberg", cfg.Path))
	}
	var names []string
	for _, cn := range found {
		names = append(names, cn.Name)
	}
	return nil, withCode(exitUsage, fmt.Errorf("%s has several iceberg connections (%v): pick one with --connection", cfg.Path, names))
}
