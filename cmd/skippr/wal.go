package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode"
	"unicode/utf8"

	"github.com/urfave/cli/v3"

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
	raw := args[0]
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "file" && u.Scheme != "s3") {
		return withCode(exitUsage, fmt.Errorf("wal inspect: %q is not a file:///abs/dir or s3://bucket/prefix URL", raw))
	}
	if u.Scheme == "file" {
		// Open treats a missing directory as an empty log to be created; here it is a typo.
		if _, err := os.Stat(u.Path); errors.Is(err, fs.ErrNotExist) {
			return withCode(exitNotFound, fmt.Errorf("wal inspect: no WAL at %s: %s does not exist", raw, u.Path))
		}
	}

	l, err := wal.Open(ctx, raw, wal.Options{
		Logger: g.Log,
		S3: wal.S3Options{
			Endpoint:        c.String("s3-endpoint"),
			Region:          c.String("s3-region"),
			PathStyle:       c.Bool("s3-path-style"),
			AccessKeyID:     os.Getenv("AWS_ACCESS_KEY_ID"),
			SecretAccessKey: os.Getenv("AWS_SECRET_ACCESS_KEY"),
		},
	})
	if err != nil {
		return withCode(exitFailure, err)
	}
	defer l.Close()
	rep, err := wal.Verify(ctx, l)
	if err != nil {
		return withCode(exitFailure, err)
	}
	if c.Bool("json") {
		enc := json.NewEncoder(c.Root().Writer)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return withCode(exitFailure, err)
		}
	} else {
		printInspect(c.Root().Writer, rep)
	}
	if rep.Bad > 0 {
		var bad []string
		for _, e := range rep.Entries {
			if !e.OK {
				bad = append(bad, e.Error)
			}
		}
		return withCode(exitFailure, fmt.Errorf("wal %s: %d of %d entries failed verification:\n  %s",
			rep.URL, rep.Bad, len(rep.Entries), strings.Join(bad, "\n  ")))
	}
	return nil
}

func printInspect(w io.Writer, rep wal.Report) {
	holder := rep.Holder
	if holder == "" {
		holder = "none"
	}
	fmt.Fprintf(w, "wal %s\n", rep.URL)
	fmt.Fprintf(w, "last seq %d, reclaimed through %d, %d entries, %d bytes, epoch %d, writer %s\n",
		rep.LastSeq, rep.ReclaimedThrough, len(rep.Entries), rep.Bytes, rep.Epoch, holder)
	fmt.Fprintf(w, "source checkpoint %s\n", printable(rep.LastCheckpoint))
	if len(rep.Entries) == 0 {
		fmt.Fprintln(w, "no entries")
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tSEGMENT\tSIZE\tROWS\tEPOCH\tTIME\tCHECKSUM")
	for _, e := range rep.Entries {
		seg, sum := e.Segment, "ok"
		if e.Fence {
			seg = "(fence)"
		}
		if !e.OK {
			sum = "BAD"
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%d\t%s\t%s\n", e.Seq, seg, e.Size, rowsText(e.Rows), e.Epoch,
			e.Time.UTC().Format("2006-01-02T15:04:05.000Z"), sum)
	}
	tw.Flush()
}

func rowsText(rows map[string]int64) string {
	if len(rows) == 0 {
		return "-"
	}
	streams := make([]string, 0, len(rows))
	for s := range rows {
		streams = append(streams, s)
	}
	sort.Strings(streams)
	parts := make([]string, len(streams))
	for i, s := range streams {
		parts[i] = s + "=" + strconv.FormatInt(rows[s], 10)
	}
	return strings.Join(parts, ",")
}

// printable shows an opaque checkpoint as text when it is text, else as hex.
func printable(b []byte) string {
	if len(b) == 0 {
		return "(none)"
	}
	if utf8.Valid(b) && strings.IndexFunc(string(b), func(r rune) bool { return !unicode.IsPrint(r) }) < 0 {
		return strconv.Quote(string(b))
	}
	return "0x" + hex.EncodeToString(b)
}
