package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/skippr-dev/skippr/engine/cmdline"
	"github.com/skippr-dev/skippr/registry"
)

// registryCommand is `skippr registry`: publish plugins into a registry folder and trust registries.
func registryCommand(g *globals) *cli.Command {
	return &cli.Command{
		Name:        "registry",
		Usage:       "publish plugins into a registry folder, and trust registries",
		Description: helpText("registry"),
		Commands: []*cli.Command{
			registryKeygenCommand(),
			registryAddCommand(),
			registrySignCommand(),
			registryTrustCommand(g),
			registryYankCommand(),
		},
	}
}

func registryKeygenCommand() *cli.Command {
	return &cli.Command{
		Name:      "keygen",
		Usage:     "create a signing key pair",
		ArgsUsage: " ",
		Description: `Writes DIR/` + registry.PrivateKeyFile + ` (mode 0600: keep it secret, it signs your index) and
DIR/` + registry.PublicKeyFile + ` (publish it: users trust your registry with it). Never overwrites a key.`,
		Flags: []cli.Flag{&cli.StringFlag{Name: "out", Usage: "directory for the key files (required)"}},
		Action: func(ctx context.Context, c *cli.Command) error {
			if err := cmdline.RequireFlags(c, "out"); err != nil {
				return err
			}
			pub, priv, id, err := registry.Keygen(c.String("out"))
			if err != nil {
				return withCode(exitFailure, err)
			}
			fmt.Fprintf(c.Root().Writer, "key id %s\n  private: %s (keep secret)\n  public:  %s\n", id, priv, pub)
			return nil
		},
	}
}

func registryAddCommand() *cli.Command {
	return &cli.Command{
		Name:        "add",
		Usage:       "add a plugin binary to a registry folder",
		ArgsUsage:   "DIR ARTIFACT",
		Description: helpText("registry-add"),
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "name", Usage: "plugin name (required)"},
			&cli.StringFlag{Name: "version", Usage: "plugin version, semver (required)"},
			&cli.StringFlag{Name: "os", Usage: "target GOOS (default: this machine's)"},
			&cli.StringFlag{Name: "arch", Usage: "target GOARCH (default: this machine's)"},
			&cli.IntSliceFlag{Name: "protocol", Usage: "protocol version the binary speaks (repeatable; required for another platform)"},
			&cli.StringFlag{Name: "kind", Usage: "source, destination or both (required for another platform)"},
			&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "no reminder to sign (for scripts that add several binaries, then sign once)"},
		},
		Action: func(ctx context.Context, c *cli.Command) error {
			args, err := cmdline.Args(c, 2, "name", "version")
			if err != nil {
				return err
			}
			art, err := registry.Add(ctx, registry.AddRequest{
				Dir: args[0], Artifact: args[1],
				Name: c.String("name"), Version: c.String("version"),
				OS: c.String("os"), Arch: c.String("arch"),
				ProtocolVersions: c.IntSlice("protocol"), Kind: c.String("kind"),
			})
			if err != nil {
				return withCode(registryExitCode(err), err)
			}
			fmt.Fprintf(c.Root().Writer, "added %s (%d bytes, sha256 %s)\n", art.URL, art.Size, art.SHA256)
			if !c.Bool("quiet") {
				fmt.Fprintf(c.Root().Writer, "index.json changed: run `skippr registry sign %s --key KEYFILE`\n", args[0])
			}
			return nil
		},
	}
}

func registrySignCommand() *cli.Command {
	return &cli.Command{
		Name:        "sign",
		Usage:       "sign a registry folder's index.json",
		ArgsUsage:   "DIR",
		Description: helpText("registry-sign"),
		Flags:       []cli.Flag{&cli.StringFlag{Name: "key", Usage: "private key file from `skippr registry keygen` (required)"}},
		Action: func(ctx context.Context, c *cli.Command) error {
			args, err := cmdline.Args(c, 1, "key")
			if err != nil {
				return err
			}
			id, err := registry.Sign(args[0], c.String("key"))
			if err != nil {
				return withCode(registryExitCode(err), err)
			}
			fmt.Fprintf(c.Root().Writer, "signed %s/%s with key %s\n", args[0], registry.IndexFile, id)
			return nil
		},
	}
}

func registryTrustCommand(g *globals) *cli.Command {
	return &cli.Command{
		Name:        "trust",
		Usage:       "trust a registry and its signing key",
		ArgsUsage:   "URL",
		Description: helpText("registry-trust"),
		Flags:       []cli.Flag{&cli.StringSliceFlag{Name: "key", Usage: "public key file (required, repeatable)"}},
		Action: func(ctx context.Context, c *cli.Command) error {
			args, err := cmdline.Args(c, 1, "key")
			if err != nil {
				return err
			}
			keys, err := registry.ReadPublicKeyFiles(c.StringSlice("key"))
			if err != nil {
				return withCode(exitUsage, fmt.Errorf("--key: %w", err))
			}
			r, err := registry.Trust(g.Home, args[0], keys...)
			if err != nil {
				return withCode(registryExitCode(err), err)
			}
			fmt.Fprintf(c.Root().Writer, "trusting %s with key %s\n", r.URL, strings.Join(r.KeyIDs(), " "))
			return nil
		},
	}
}

func registryYankCommand() *cli.Command {
	return &cli.Command{
		Name:        "yank",
		Usage:       "withdraw a published version",
		ArgsUsage:   "DIR NAME VERSION",
		Description: helpText("registry-yank"),
		Flags:       []cli.Flag{&cli.StringFlag{Name: "reason", Usage: "why the version was withdrawn (required)"}},
		Action: func(ctx context.Context, c *cli.Command) error {
			args, err := cmdline.Args(c, 3, "reason")
			if err != nil {
				return err
			}
			if err := registry.Yank(args[0], args[1], args[2], c.String("reason")); err != nil {
				return withCode(registryExitCode(err), err)
			}
			fmt.Fprintf(c.Root().Writer, "yanked %s %s\nindex.json changed: run `skippr registry sign %s --key KEYFILE`\n", args[1], args[2], args[0])
			return nil
		},
	}
}
