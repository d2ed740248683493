package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/urfave/cli/v3"

	"github.com/skippr-dev/skippr/engine/cmdline"
	"github.com/skippr-dev/skippr/engine/wal"
)

func walCommand(g *globals) *cli.Command {
	return &cli.Command{
		Name:     "wal",
		Usage:    "inspect the engine's write-ahead log",
		Commands: []*cli.Command{walInspectCommand(g)},
	}
}

func walInspectCommand(g *globals) *cli.Command {
	return &cli.Command{
		Name:      "inspect",
		Usage:     "list WAL entries and verify every segment's size and CRC-32C",
		ArgsUsage: "URL",
		Description: "URL is file:///abs/dir or s3://bucket/prefix. Read-only: takes no lease, so it is safe\n" +
			"beside a running pipeline. Exits 1 if any entry fails verification, naming it.\n" +
			"S3 credentials come from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, else the default AWS chain.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print a JSON report instead of a table"},
			&cli.StringFlag{Name: "s3-endpoint", Usage: "S3-compatible endpoint URL (empty: AWS)"},
			&cli.StringFlag{Name: "s3-region", Usage: "S3 region (empty: from the environment, else us-east-1)"},
			&cli.BoolFlag{Name: "s3-path-style", Usage: "address buckets in the path (most S3-compatible servers)"},
		},
		Action: func(ctx context.Context, c *cli.Command) error { return walInspect(ctx, c, g) },
	}
}

func walInspect(ctx context.Context, c *cli.Command, g *globals) error {
	args := c.Args().Slice()
	if len(args) != 1 {
		return withCode(exitUsage, fmt.Errorf("wal inspect: want one URL (file:///abs/dir or s3://bucket/prefix), got %d arguments", len(args)))
	}
	rep, err := wal.Inspect(ctx, args[0], wal.Options{
		Logger: g.Log,
		S3: wal.S3Options{
			Endpoint:        c.String("s3-endpoint"),
			Region:          c.String("s3-region"),
			PathStyle:       c.Bool("s3-path-style"),
			AccessKeyID:     os.Getenv("AWS_ACCESS_KEY_ID"),
			SecretAccessKey: os.Getenv("AWS_SECRET_ACCESS_KEY"),
		},
	})
	switch {
	case errors.Is(err, wal.ErrInspectURL):
		return withCode(exitUsage, fmt.Errorf("wal inspect: %w", err))
	case errors.Is(err, wal.ErrNoLog):
		return withCode(cmdline.ExitNotFound, fmt.Errorf("wal inspect: %w", err))
	case err != nil:
		return withCode(exitFailure, err)
	}
	if c.Bool("json") {
		if err := cmdline.WriteJSON(c.Root().Writer, rep); err != nil {
			return withCode(exitFailure, err)
		}
	} else {
		rep.WriteText(c.Root().Writer)
	}
	return withCode(exitFailure, rep.Err())
}
