package wal

import (
	"context"
	"encoding/hex"
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
)

// Errors of Inspect that name a wrong argument rather than a damaged log.
var (
	// ErrInspectURL: the URL is neither file:///abs/dir nor s3://bucket/prefix.
	ErrInspectURL = errors.New("not a WAL URL")
	// ErrNoLog: a file:// URL names a directory that does not exist.
	ErrNoLog = errors.New("no WAL")
)

// Inspect opens the log at rawURL without taking its lease, so it is safe beside a running writer, and
// verifies every live entry (Verify). Unlike Open it refuses a URL of another scheme (ErrInspectURL) and a
// local directory that does not exist (ErrNoLog): Open takes a missing directory for an empty log to be
// created, which for an inspection is a typo. A bad entry is in the Report, not an error: see Report.Err.
func Inspect(ctx context.Context, rawURL string, opts Options) (Report, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "file" && u.Scheme != "s3") {
		return Report{}, &argError{fmt.Sprintf("%q is not a file:///abs/dir or s3://bucket/prefix URL", rawURL), ErrInspectURL}
	}
	if u.Scheme == "file" {
		if _, err := os.Stat(u.Path); errors.Is(err, fs.ErrNotExist) {
			return Report{}, &argError{fmt.Sprintf("no WAL at %s: %s does not exist", rawURL, u.Path), ErrNoLog}
		}
	}
	l, err := Open(ctx, rawURL, opts)
	if err != nil {
		return Report{}, err
	}
	defer l.Close()
	return Verify(ctx, l)
}

// argError is a message that matches its kind (ErrInspectURL, ErrNoLog) with errors.Is.
type argError struct {
	msg  string
	kind error
}

func (e *argError) Error() string        { return e.msg }
func (e *argError) Is(target error) bool { return target == e.kind }

// Err names every entry that failed verification, or is nil when none did.
func (r Report) Err() error {
	if r.Bad == 0 {
		return nil
	}
	var bad []string
	for _, e := range r.Entries {
		if !e.OK {
			bad = append(bad, e.Error)
		}
	}
	return fmt.Errorf("wal %s: %d of %d entries failed verification:\n  %s",
		r.URL, r.Bad, len(r.Entries), strings.Join(bad, "\n  "))
}

// WriteText prints the report for a person: the head, then one line per entry (rows per stream, BAD for an
// entry that failed verification).
func (r Report) WriteText(w io.Writer) error {
	holder := r.Holder
	if holder == "" {
		holder = "none"
	}
	fmt.Fprintf(w, "wal %s\n", r.URL)
	fmt.Fprintf(w, "last seq %d, reclaimed through %d, %d entries, %d bytes, epoch %d, writer %s\n",
		r.LastSeq, r.ReclaimedThrough, len(r.Entries), r.Bytes, r.Epoch, holder)
	fmt.Fprintf(w, "source checkpoint %s\n", printable(r.LastCheckpoint))
	if len(r.Entries) == 0 {
		_, err := fmt.Fprintln(w, "no entries")
		return err
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tSEGMENT\tSIZE\tROWS\tEPOCH\tTIME\tCHECKSUM")
	for _, e := range r.Entries {
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
	return tw.Flush()
}

// rowsText is an entry's rows per stream, by stream name: "a=1,b=2".
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
