package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
)

// Settings is a connection's free-form settings after interpolation, as an ordered tree
// that remembers where each value came from and whether it came from ${…}.
//
// Rendering it any way meant for humans — String, fmt's %v, slog, json.Marshal — redacts
// interpolated values. Only JSON and Map return the real values, for the plugin.
type Settings struct {
	root *setting // a mapping; nil means no settings
}

type settingKind int

const (
	kindScalar settingKind = iota
	kindMap
	kindList
)

type setting struct {
	kind   settingKind
	pos    Pos    // the key (or list item) this value belongs to
	path   string // key path for errors
	scalar any    // nil, bool, json.Number or string
	secret bool   // scalar came from ${…}
	keys   []string
	fields map[string]*setting
	items  []*setting
}

// Len is the number of top-level settings.
func (s Settings) Len() int {
	if s.root == nil {
		return 0
	}
	return len(s.root.keys)
}

// JSON encodes the settings as a JSON object with keys in file order. It contains secrets.
func (s Settings) JSON() ([]byte, error) {
	var b bytes.Buffer
	if s.root == nil {
		return []byte("{}"), nil
	}
	if err := s.root.encode(&b, false); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// RedactedJSON is JSON with every value that came from ${…} replaced by RedactedValue.
func (s Settings) RedactedJSON() []byte {
	if s.root == nil {
		return []byte("{}")
	}
	var b bytes.Buffer
	if err := s.root.encode(&b, true); err != nil {
		// encode fails only on values Load never produces; say so rather than leak.
		return []byte(strconv.Quote("unrenderable settings: " + err.Error()))
	}
	return b.Bytes()
}

// Map returns the settings as plain Go values: map[string]any, []any, string, bool,
// json.Number and nil. It contains secrets.
func (s Settings) Map() map[string]any {
	if s.root == nil {
		return map[string]any{}
	}
	return s.root.plain(false).(map[string]any)
}

// Redacted is Map with every value that came from ${…} replaced by RedactedValue.
func (s Settings) Redacted() map[string]any {
	if s.root == nil {
		return map[string]any{}
	}
	return s.root.plain(true).(map[string]any)
}

// String renders redacted JSON so that printing a Connection never shows a secret.
func (s Settings) String() string { return string(s.RedactedJSON()) }

// GoString keeps %#v redacted too.
func (s Settings) GoString() string { return "config.Settings" + s.String() }

// MarshalJSON renders redacted settings: a marshalled Config is for people, not plugins.
func (s Settings) MarshalJSON() ([]byte, error) { return s.RedactedJSON(), nil }

// LogValue makes slog print settings as a redacted group.
func (s Settings) LogValue() slog.Value {
	if s.root == nil {
		return slog.GroupValue()
	}
	return s.root.logValue()
}

func (n *setting) logValue() slog.Value {
	switch n.kind {
	case kindMap:
		attrs := make([]slog.Attr, 0, len(n.keys))
		for _, k := range n.keys {
			attrs = append(attrs, slog.Attr{Key: k, Value: n.fields[k].logValue()})
		}
		return slog.GroupValue(attrs...)
	case kindList:
		return slog.AnyValue(n.plain(true))
	}
	if n.secret {
		return slog.StringValue(RedactedValue)
	}
	if num, ok := n.scalar.(json.Number); ok {
		return slog.StringValue(num.String())
	}
	return slog.AnyValue(n.scalar)
}

func (n *setting) plain(redact bool) any {
	switch n.kind {
	case kindMap:
		m := make(map[string]any, len(n.keys))
		for _, k := range n.keys {
			m[k] = n.fields[k].plain(redact)
		}
		return m
	case kindList:
		l := make([]any, len(n.items))
		for i, it := range n.items {
			l[i] = it.plain(redact)
		}
		return l
	}
	if redact && n.secret {
		return RedactedValue
	}
	return n.scalar
}

func (n *setting) encode(b *bytes.Buffer, redact bool) error {
	switch n.kind {
	case kindMap:
		b.WriteByte('{')
		for i, k := range n.keys {
			if i > 0 {
				b.WriteByte(',')
			}
			kb, _ := json.Marshal(k) // strings always marshal
			b.Write(kb)
			b.WriteByte(':')
			if err := n.fields[k].encode(b, redact); err != nil {
				return err
			}
		}
		b.WriteByte('}')
		return nil
	case kindList:
		b.WriteByte('[')
		for i, it := range n.items {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := it.encode(b, redact); err != nil {
				return err
			}
		}
		b.WriteByte(']')
		return nil
	}
	if redact && n.secret {
		b.WriteString(strconv.Quote(RedactedValue))
		return nil
	}
	switch v := n.scalar.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(v))
	case json.Number:
		if !isJSONNumber(string(v)) {
			return fmt.Errorf("%s: %q is not a JSON number", n.path, v)
		}
		b.WriteString(string(v))
	case string:
		sb, _ := json.Marshal(v)
		b.Write(sb)
	default:
		return fmt.Errorf("%s: unsupported value type %T", n.path, v)
	}
	return nil
}

// locate walks JSON pointer tokens down the tree and returns the deepest node reached
// plus the tokens it could not follow.
func (n *setting) locate(tokens []string) (*setting, []string) {
	cur := n
	for i, tok := range tokens {
		var next *setting
		switch cur.kind {
		case kindMap:
			next = cur.fields[tok]
		case kindList:
			if idx, err := strconv.Atoi(tok); err == nil && idx >= 0 && idx < len(cur.items) {
				next = cur.items[idx]
			}
		}
		if next == nil {
			return cur, tokens[i:]
		}
		cur = next
	}
	return cur, nil
}

// isJSONNumber reports whether s matches JSON's number grammar exactly.
func isJSONNumber(s string) bool {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	digits := func() int {
		start := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		return i - start
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case digits() == 0:
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(s)
}
