package redact

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

func TestRedact(t *testing.T) {
	x := New()
	x.Add(map[string]string{"PASS": `s3"cr3t`, "LONG": `s3"cr3t-and-more`, "SHORT": "1"})
	for _, tc := range []struct{ in, want string }{
		{`mkdir /proc/s3"cr3t: denied`, `mkdir /proc/${PASS}: denied`},
		{`plugin s3"cr3t-and-more: not installed`, `plugin ${LONG}: not installed`},
		{"port 1 stays", "port 1 stays"},
	} {
		if got := x.String(tc.in); got != tc.want {
			t.Errorf("String(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}

	// The handler redacts before a JSON handler escapes the quote; message, attrs, errors, groups and
	// attrs added by With alike.
	var buf bytes.Buffer
	log := slog.New(x.Handler(slog.NewJSONHandler(&buf, nil))).With("dir", `/proc/s3"cr3t`)
	log.Error(`open s3"cr3t`, "err", fmt.Errorf("wrapped: %w", errors.New(`s3"cr3t`)), slog.Group("g", "v", `s3"cr3t`))
	var w bytes.Buffer
	fmt.Fprintf(x.Writer(&w), "plugin log: %s\n", `s3"cr3t`)
	for _, out := range []string{buf.String(), w.String()} {
		if strings.Contains(out, "cr3t") || !strings.Contains(out, "${PASS}") {
			t.Errorf("not redacted: %s", out)
		}
	}
}
