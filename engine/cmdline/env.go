package cmdline

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"golang.org/x/term"
)

// DefaultHome is $SKIPPR_HOME, else ~/.skippr, else .skippr when the user has no home directory.
func DefaultHome() string {
	if h := os.Getenv("SKIPPR_HOME"); h != "" {
		return h
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".skippr")
	}
	return ".skippr"
}

// NewLogger is the logger --log-level (debug, info, warn, error) and --log-format (text, json) ask for,
// writing to w through wrap (the redactor, which hides the config's secrets). Bad values are usage errors.
func NewLogger(level, format string, w io.Writer, wrap func(slog.Handler) slog.Handler) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, WithCode(ExitUsage, fmt.Errorf("--log-level: %w", err))
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch format {
	case "json":
		return slog.New(wrap(slog.NewJSONHandler(w, opts))), nil
	case "text":
		return slog.New(wrap(slog.NewTextHandler(w, opts))), nil
	}
	return nil, WithCode(ExitUsage, fmt.Errorf("--log-format %q: want text or json", format))
}

// IsTerminal reports whether w is a terminal (progress bars redraw in place only there).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// WriteJSON writes v as the indented JSON the commands' --json prints for scripts.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
