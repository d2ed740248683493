package pluginhost

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"slices"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// PluginLog hands go-plugin's log entries to l, so a plugin's lines come out beside the engine's: at their own
// level, in the engine's format (text or JSON, the same keys), through the same redaction, each with the plugin
// binary's name. go-plugin speaks hclog: it re-logs every JSON line a plugin writes to stderr through a logger
// Named after the binary, and logs its own lifecycle through the root. Its root's info messages ("plugin process
// exited", at the end of every command) go to debug: a person reading a sync's log wants the plugin's
// "table copied", not that.
func PluginLog(l *slog.Logger) hclog.Logger { return &pluginLog{log: l, root: true} }

type pluginLog struct {
	log  *slog.Logger
	name string // the plugin binary; "" at the root
	root bool
	args []any
}

var levels = map[hclog.Level]slog.Level{
	hclog.Trace: slog.LevelDebug - 4,
	hclog.Debug: slog.LevelDebug,
	hclog.Info:  slog.LevelInfo,
	hclog.Warn:  slog.LevelWarn,
	hclog.Error: slog.LevelError,
}

func (p *pluginLog) level(h hclog.Level) slog.Level {
	lvl, ok := levels[h]
	if !ok {
		lvl = slog.LevelInfo
	}
	if p.root && lvl == slog.LevelInfo {
		lvl = slog.LevelDebug
	}
	return lvl
}

func (p *pluginLog) enabled(h hclog.Level) bool {
	return p.log.Enabled(context.Background(), p.level(h))
}

func (p *pluginLog) Log(h hclog.Level, msg string, args ...any) {
	lvl := p.level(h)
	ctx := context.Background()
	if !p.log.Enabled(ctx, lvl) {
		return
	}
	attrs := make([]any, 0, 2+len(p.args)+len(args))
	if p.name != "" {
		attrs = append(attrs, "plugin", p.name)
	}
	attrs = append(attrs, p.args...)
	// go-plugin hands a plugin line's fields over from a map, in random order: sorted, equal lines read alike.
	type field struct {
		key string
		val any
	}
	var fields []field
	for i := 0; i+1 < len(args); i += 2 {
		key := fmt.Sprint(args[i])
		if key == "timestamp" || key == "@module" {
			continue // the engine's handler stamps the line, and plugin= names it
		}
		fields = append(fields, field{key, args[i+1]})
	}
	slices.SortStableFunc(fields, func(a, b field) int { return strings.Compare(a.key, b.key) })
	for _, f := range fields {
		attrs = append(attrs, f.key, f.val)
	}
	p.log.Log(ctx, lvl, msg, attrs...)
}

func (p *pluginLog) Trace(msg string, args ...any) { p.Log(hclog.Trace, msg, args...) }
func (p *pluginLog) Debug(msg string, args ...any) { p.Log(hclog.Debug, msg, args...) }
func (p *pluginLog) Info(msg string, args ...any)  { p.Log(hclog.Info, msg, args...) }
func (p *pluginLog) Warn(msg string, args ...any)  { p.Log(hclog.Warn, msg, args...) }
func (p *pluginLog) Error(msg string, args ...any) { p.Log(hclog.Error, msg, args...) }
func (p *pluginLog) IsTrace() bool                 { return p.enabled(hclog.Trace) }
func (p *pluginLog) IsDebug() bool                 { return p.enabled(hclog.Debug) }
func (p *pluginLog) IsInfo() bool                  { return p.enabled(hclog.Info) }
func (p *pluginLog) IsWarn() bool                  { return p.enabled(hclog.Warn) }
func (p *pluginLog) IsError() bool                 { return p.enabled(hclog.Error) }
func (p *pluginLog) ImpliedArgs() []any            { return p.args }
func (p *pluginLog) Name() string                  { return p.name }

func (p *pluginLog) With(args ...any) hclog.Logger {
	c := *p
	c.args = append(append([]any(nil), p.args...), args...)
	return &c
}

func (p *pluginLog) Named(name string) hclog.Logger {
	if p.name != "" {
		name = p.name + "." + name
	}
	return p.ResetNamed(name)
}

// ResetNamed names the logger of one plugin binary: go-plugin names it after the file, and plugin= carries the
// name the config uses (skippr-plugin-postgres → postgres), as the engine's own lines do.
func (p *pluginLog) ResetNamed(name string) hclog.Logger {
	c := *p
	c.name, c.root = strings.TrimPrefix(name, "skippr-plugin-"), false
	return &c
}

// SetLevel does nothing: the engine's --log-level decides, in the slog handler.
func (p *pluginLog) SetLevel(hclog.Level) {}

// GetLevel is the lowest level that gets through (go-plugin skips parsing lines below it).
func (p *pluginLog) GetLevel() hclog.Level {
	for _, h := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Info, hclog.Warn, hclog.Error} {
		if p.log.Enabled(context.Background(), levels[h]) {
			return h
		}
	}
	return hclog.Off
}

func (p *pluginLog) StandardLogger(*hclog.StandardLoggerOptions) *log.Logger {
	return slog.NewLogLogger(p.log.Handler(), slog.LevelInfo)
}

func (p *pluginLog) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	return p.StandardLogger(opts).Writer()
}
