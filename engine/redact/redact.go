// Package redact hides the values a config took from the environment (${NAME}) in everything skippr prints:
// each value is replaced by its reference, so a reader still sees which variable was involved.
//
// The values are known only once the config is loaded, after logging has started, so a Redactor is created
// empty, handed to the log handler and the writers, and filled by Add.
package redact

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"sync"
)

// minLen: values shorter than this are not redacted. A one- or two-character value ("1", "on") would turn
// every occurrence of it in every message into noise while hiding nothing worth hiding.
const minLen = 3

// Redactor replaces known secret values with their ${NAME} references.
type Redactor struct {
	mu sync.RWMutex
	r  *strings.Replacer
	m  map[string]string // value → ${NAME}
}

// New returns an empty Redactor.
func New() *Redactor { return &Redactor{m: map[string]string{}} }

// Add registers the values of environment variables (name → value).
func (x *Redactor) Add(vars map[string]string) {
	if x == nil {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	for name, v := range vars {
		if len(v) >= minLen {
			x.m[v] = "${" + name + "}"
		}
	}
	// Longest values first, so a value that contains another is replaced whole.
	vals := make([]string, 0, len(x.m))
	for v := range x.m {
		vals = append(vals, v)
	}
	sort.Slice(vals, func(i, j int) bool { return len(vals[i]) > len(vals[j]) })
	var pairs []string
	for _, v := range vals {
		pairs = append(pairs, v, x.m[v])
	}
	x.r = strings.NewReplacer(pairs...)
}

// String returns s with every secret value replaced.
func (x *Redactor) String(s string) string {
	if x == nil {
		return s
	}
	x.mu.RLock()
	r := x.r
	x.mu.RUnlock()
	if r == nil {
		return s
	}
	return r.Replace(s)
}

// Writer redacts each Write to w. Callers write whole lines (log handlers, hclog), so a value is never split
// across two writes.
func (x *Redactor) Writer(w io.Writer) io.Writer { return writer{x, w} }

type writer struct {
	x *Redactor
	w io.Writer
}

func (w writer) Write(p []byte) (int, error) {
	if _, err := io.WriteString(w.w, w.x.String(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Handler wraps h so that the message and every attribute are redacted before h formats them (a JSON
// handler escapes strings, so redacting its output would miss values with quotes or backslashes).
func (x *Redactor) Handler(h slog.Handler) slog.Handler { return &handler{x: x, h: h} }

type handler struct {
	x *Redactor
	h slog.Handler
}

func (h *handler) Enabled(ctx context.Context, l slog.Level) bool { return h.h.Enabled(ctx, l) }

func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, h.x.String(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.attr(a))
		return true
	})
	return h.h.Handle(ctx, out)
}

func (h *handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	red := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		red[i] = h.attr(a)
	}
	return &handler{x: h.x, h: h.h.WithAttrs(red)}
}

func (h *handler) WithGroup(name string) slog.Handler {
	return &handler{x: h.x, h: h.h.WithGroup(name)}
}

func (h *handler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, h.x.String(v.String()))
	case slog.KindGroup:
		g := v.Group()
		red := make([]any, len(g))
		for i, ga := range g {
			red[i] = h.attr(ga)
		}
		return slog.Group(a.Key, red...)
	case slog.KindAny:
		// Errors, slices, structs: their printed form is what a handler would show.
		return slog.String(a.Key, h.x.String(fmt.Sprint(v.Any())))
	}
	return slog.Attr{Key: a.Key, Value: v}
}
