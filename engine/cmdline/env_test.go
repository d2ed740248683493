package cmdline

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// --log-level and --log-format pick the handler and level; bad values are usage errors naming the flag.
func TestNewLogger(t *testing.T) {
	tests := []struct {
		level, format string
		want          string // in what an Info and a Debug line print
		wantErr       string
	}{
		{"info", "text", `level=INFO msg=hello`, ""},
		{"info", "json", `"level":"INFO","msg":"hello"`, ""},
		{"debug", "text", `level=DEBUG msg=detail`, ""},
		{"warn", "text", "", ""},
		{"loud", "text", "", `--log-level: slog: level string "loud": unknown name`},
		{"info", "yaml", "", `--log-format "yaml": want text or json`},
	}
	for _, tt := range tests {
		var out bytes.Buffer
		wrapped := false
		wrap := func(h slog.Handler) slog.Handler { wrapped = true; return h }
		log, err := NewLogger(tt.level, tt.format, &out, wrap)
		if tt.wantErr != "" {
			var ee *exitError
			if !errors.As(err, &ee) || ee.code != ExitUsage || err.Error() != tt.wantErr || log != nil {
				t.Errorf("%s/%s: %v, %v; want exit %d and %q", tt.level, tt.format, log, err, ExitUsage, tt.wantErr)
			}
			continue
		}
		if err != nil || !wrapped {
			t.Fatalf("%s/%s: %v (handler wrapped: %v)", tt.level, tt.format, err, wrapped)
		}
		log.Info("hello")
		log.Debug("detail")
		if got := out.String(); tt.want == "" && got != "" || !strings.Contains(got, tt.want) {
			t.Errorf("%s/%s printed %q; want %q", tt.level, tt.format, got, tt.want)
		}
	}
}

func TestDefaultHome(t *testing.T) {
	t.Setenv("SKIPPR_HOME", "/srv/skippr")
	if got := DefaultHome(); got != "/srv/skippr" {
		t.Errorf("with SKIPPR_HOME: %q", got)
	}
	t.Setenv("SKIPPR_HOME", "")
	t.Setenv("HOME", "/home/u")
	if got := DefaultHome(); got != filepath.Join("/home/u", ".skippr") {
		t.Errorf("with HOME: %q", got)
	}
	t.Setenv("HOME", "")
	if got := DefaultHome(); got != ".skippr" {
		t.Errorf("without a home: %q", got)
	}
}

func TestIsTerminalAndWriteJSON(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if IsTerminal(f) || IsTerminal(&bytes.Buffer{}) {
		t.Error("a file or a buffer taken for a terminal")
	}
	var out bytes.Buffer
	if err := WriteJSON(&out, map[string]any{"a": []int{1}}); err != nil || out.String() != "{\n  \"a\": [\n    1\n  ]\n}\n" {
		t.Errorf("WriteJSON printed %q, %v", out.String(), err)
	}
}
