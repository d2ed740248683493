package pluginhost

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
)

func TestPluginLog(t *testing.T) {
	for _, tc := range []struct {
		name  string
		level slog.Level
		log   func(hclog.Logger)
		want  string // "" for nothing printed
	}{
		{"a plugin's info line", slog.LevelInfo, func(l hclog.Logger) {
			l.Named("skippr-plugin-postgres").Info("table copied", "table", "public.a", "rows", 3, "@module", "postgres", "timestamp", "2026-12-04T16:00:00.000000Z")
		}, `level=INFO msg="table copied" plugin=postgres rows=3 table=public.a`},
		{"a plugin's warning", slog.LevelWarn, func(l hclog.Logger) {
			l.Named("skippr-plugin-mysql").With("k", "v").Warn("slow")
		}, `level=WARN msg=slow plugin=mysql k=v`},
		{"below the level", slog.LevelWarn, func(l hclog.Logger) { l.Named("p").Info("table copied") }, ""},
		{"go-plugin's own info goes to debug", slog.LevelInfo, func(l hclog.Logger) { l.Info("plugin process exited", "id", 7) }, ""},
		{"go-plugin's own info at debug", slog.LevelDebug, func(l hclog.Logger) { l.Info("plugin process exited", "id", 7) },
			`level=DEBUG msg="plugin process exited" id=7`},
		{"go-plugin's own errors stay errors", slog.LevelInfo, func(l hclog.Logger) { l.Error("plugin process exited", "error", "killed") },
			`level=ERROR msg="plugin process exited" error=killed`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			l := PluginLog(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: tc.level, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
				if a.Key == slog.TimeKey {
					return slog.Attr{}
				}
				return a
			}})))
			tc.log(l)
			if got := strings.TrimSpace(buf.String()); got != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

// go-plugin skips parsing a plugin's lines below GetLevel, so it must be the engine's level.
func TestPluginLogLevel(t *testing.T) {
	for lvl, want := range map[slog.Level]hclog.Level{slog.LevelDebug: hclog.Debug, slog.LevelInfo: hclog.Info, slog.LevelWarn: hclog.Warn, slog.LevelError: hclog.Error} {
		l := PluginLog(slog.New(slog.NewTextHandler(&bytes.Buffer{}, &slog.HandlerOptions{Level: lvl})))
		if got := l.Named("p").GetLevel(); got != want {
			t.Errorf("at %v: GetLevel %v, want %v", lvl, got, want)
		}
	}
}
