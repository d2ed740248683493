package config

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	goyaml "github.com/goccy/go-yaml"
	goyamlparser "github.com/goccy/go-yaml/parser"
	"gopkg.in/yaml.v3"

	"github.com/skippr-dev/skippr/internal/suggest"
)

// This file walks yaml.v3 nodes: it keeps every key's position, follows aliases and
// merge keys, interpolates scalars, and collects errors instead of stopping at the first.

// maxSettingsValues bounds how many values aliases may expand settings into, so a
// "billion laughs" document fails instead of eating memory.
const maxSettingsValues = 100_000

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// parseYAML returns the root node of the single document in data, or nil for a
// document with no content (empty, or comments only).
func parseYAML(file string, data []byte) (*yaml.Node, error) {
	data = protectRefs(data)
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, syntaxError(file, data, err)
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case err == nil:
		return nil, &Error{Pos: Pos{File: file, Line: next.Line, Column: next.Column},
			Msg: "a config file holds one YAML document, found a second one (remove the --- separator)"}
	case !errors.Is(err, io.EOF):
		return nil, syntaxError(file, data, err)
	}
	if len(doc.Content) == 0 {
		return nil, nil
	}
	restoreRefs(doc.Content[0], map[*yaml.Node]bool{})
	return doc.Content[0], nil
}

// syntaxError reports where the YAML is broken. yaml.v3 names the line where the enclosing
// block or flow collection began (a bad indent on line 12 is reported at the mapping's
// line 4), so the document is parsed again with goccy/go-yaml, whose errors carry the
// offending token's own line and column. yaml.v3's message leads (it says what was
// expected, such as a missing ':'), goccy's follows; yaml.v3's line is the fallback when
// goccy accepts what yaml.v3 refused.
func syntaxError(file string, data []byte, err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
	}
	var se *goyaml.SyntaxError
	if _, gerr := goyamlparser.ParseBytes(data, 0); errors.As(gerr, &se) && se.Token != nil && se.Token.Position != nil {
		if gmsg := strings.ReplaceAll(se.Message, "\t", `\t`); !strings.Contains(gmsg, msg) {
			msg = fmt.Sprintf("%s (%s)", msg, gmsg)
		}
		return &Error{Pos: Pos{File: file, Line: se.Token.Position.Line, Column: se.Token.Position.Column},
			Msg: "YAML syntax: " + msg}
	}
	return &Error{Pos: Pos{File: file, Line: line}, Msg: "YAML syntax: " + msg}
}

type loader struct {
	file string // as named by the caller
	dir  string // absolute directory of file
	env  func(string) (string, bool)
	errs []*Error
	pos  map[string]Pos
	// active holds the collections being walked, so an alias to an ancestor is an
	// error rather than endless recursion.
	active map[*yaml.Node]bool
	values int // settings values built
}

func (l *loader) errorf(pos Pos, key, format string, args ...any) {
	l.errs = append(l.errs, &Error{Pos: pos, Key: key, Msg: fmt.Sprintf(format, args...)})
}

func (l *loader) at(n *yaml.Node) Pos {
	return Pos{File: l.file, Line: n.Line, Column: n.Column}
}

// result sorts errors into file order, drops repeats (an aliased node is walked once per
// use) and joins them.
func (l *loader) result() error {
	return joinErrors(l.errs)
}

func joinErrors(errs []*Error) error {
	slices.SortStableFunc(errs, func(a, b *Error) int {
		return cmp.Or(cmp.Compare(a.Pos.Line, b.Pos.Line), cmp.Compare(a.Pos.Column, b.Pos.Column))
	})
	var out []error
	seen := map[Error]bool{}
	for _, e := range errs {
		if seen[*e] {
			continue
		}
		seen[*e] = true
		out = append(out, e)
	}
	return errors.Join(out...)
}

func deref(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	n = deref(n)
	return n == nil || n.Kind == 0 || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null")
}

// describe names a node's type for "want X, got Y" errors without showing its value.
func describe(n *yaml.Node) string {
	n = deref(n)
	switch {
	case isNull(n):
		return "null"
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	}
	switch n.ShortTag() {
	case "!!bool":
		return "a boolean"
	case "!!int", "!!float":
		return "a number"
	}
	return "a string"
}

var plainKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// joinKey extends a key path; keys that are not plain words are quoted so the path
// stays unambiguous: settings["a.b"].
func joinKey(parent, key string) string {
	switch {
	case !plainKey.MatchString(key):
		return parent + "[" + strconv.Quote(key) + "]"
	case parent == "":
		return key
	}
	return parent + "." + key
}

func indexKey(parent string, i int) string { return fmt.Sprintf("%s[%d]", parent, i) }

// entry is one key of a mapping (or one list item) with its value.
type entry struct {
	key  string
	path string
	pos  Pos        // where the key (or list item) is
	val  *yaml.Node // alias-resolved; may be a null scalar
}

// entries lists a mapping's entries in file order with merge keys (<<) applied,
// reports duplicate and non-scalar keys, and records every key's position.
func (l *loader) entries(n *yaml.Node, path string) []entry {
	if l.active[n] {
		l.errorf(l.at(n), path, "an alias refers to a mapping that contains it")
		return nil
	}
	l.active[n] = true
	defer delete(l.active, n)

	var out []entry
	index := map[string]int{}
	fromMerge := map[string]bool{}
	add := func(e entry, merged bool) {
		j, dup := index[e.key]
		switch {
		case !dup:
			index[e.key] = len(out)
			out = append(out, e)
			fromMerge[e.key] = merged
		case merged:
			// Explicit keys and earlier merge sources win over later ones.
		case fromMerge[e.key]:
			out[j] = e
			fromMerge[e.key] = false
		default:
			l.errorf(e.pos, e.path, "duplicate key (first defined on line %d)", out[j].pos.Line)
		}
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		kd := deref(k)
		if kd.Kind != yaml.ScalarNode {
			l.errorf(l.at(k), path, "keys must be scalars, got %s", describe(kd))
			continue
		}
		if kd.ShortTag() == "!!merge" {
			for _, e := range l.mergeSources(v, path) {
				add(e, true)
			}
			continue
		}
		add(entry{key: kd.Value, path: joinKey(path, kd.Value), pos: l.at(k), val: deref(v)}, false)
	}
	for _, e := range out {
		l.pos[e.path] = e.pos
	}
	return out
}

func (l *loader) mergeSources(v *yaml.Node, path string) []entry {
	v = deref(v)
	switch v.Kind {
	case yaml.MappingNode:
		return l.entries(v, path)
	case yaml.SequenceNode:
		var out []entry
		for _, it := range v.Content {
			if d := deref(it); d.Kind == yaml.MappingNode {
				out = append(out, l.entries(d, path)...)
				continue
			}
			l.errorf(l.at(it), path, "a merge (<<) takes a mapping or a list of mappings, got %s", describe(it))
		}
		return out
	}
	l.errorf(l.at(v), path, "a merge (<<) takes a mapping or a list of mappings, got %s", describe(v))
	return nil
}

// object is a mapping with a fixed set of keys.
type object struct {
	l    *loader
	path string
	pos  Pos  // the mapping's own key: missing keys are reported here
	ok   bool // false after a type error, so missing keys are not reported on top
	by   map[string]entry
}

// object checks n is a mapping holding only allowed keys. A null or absent n is an empty
// mapping.
func (l *loader) object(n *yaml.Node, path string, pos Pos, allowed ...string) *object {
	o := &object{l: l, path: path, pos: pos, ok: true, by: map[string]entry{}}
	n = deref(n)
	if isNull(n) {
		return o
	}
	if n.Kind != yaml.MappingNode {
		l.errorf(pos, path, "want a mapping with keys %s; got %s", strings.Join(allowed, ", "), describe(n))
		o.ok = false
		return o
	}
	for _, e := range l.entries(n, path) {
		if !slices.Contains(allowed, e.key) {
			if s := suggest.Closest(e.key, allowed); s != "" {
				l.errorf(e.pos, e.path, "unknown key; did you mean %q?", s)
			} else {
				l.errorf(e.pos, e.path, "unknown key (want one of: %s)", strings.Join(allowed, ", "))
			}
			continue
		}
		o.by[e.key] = e
	}
	return o
}

// get returns a key's entry; ok is false when it is absent or null.
func (o *object) get(key string) (entry, bool) {
	e, ok := o.by[key]
	return e, ok && !isNull(e.val)
}

// need reports a required key that is absent (at the parent) or null (at the key).
func (o *object) need(key string) (entry, bool) {
	if e, ok := o.get(key); ok {
		return e, true
	}
	if e, present := o.by[key]; present {
		o.l.errorf(e.pos, e.path, "needs a value")
	} else if o.ok {
		o.l.errorf(o.pos, o.path, "missing required key %q", key)
	}
	return entry{}, false
}

// scalar is a scalar value after interpolation.
type scalar struct {
	text   string
	raw    string // as written in the file
	tag    string // YAML type after interpolation: !!str, !!int, !!float, !!bool, !!null, …
	secret bool   // text came (partly) from ${…}
}

// show quotes a value for an error message without revealing anything from the
// environment.
func (s scalar) show() string {
	if s.secret {
		return fmt.Sprintf("the value of %q", s.raw)
	}
	return strconv.Quote(s.text)
}

// detail formats part of a value for an error message, or nothing when the value came
// from the environment.
func (s scalar) detail(format string, args ...any) string {
	if s.secret {
		return ""
	}
	return fmt.Sprintf(format, args...)
}

// redact drops the value-quoting detail of err when the value came from the environment.
func (s scalar) redact(err error) error {
	var de *detailError
	if s.secret && errors.As(err, &de) {
		return errors.New(de.generic)
	}
	return err
}

// scalar interpolates e's value, which must be a scalar (want describes what is
// expected otherwise). Interpolated plain scalars are re-typed by JSON rules; quoted ones
// stay strings (see doc.go).
func (l *loader) scalar(e entry, want string) (scalar, bool) {
	n := e.val
	if n.Kind != yaml.ScalarNode {
		l.errorf(e.pos, e.path, "want %s; got %s", want, describe(n))
		return scalar{}, false
	}
	text, expanded, err := interpolate(n.Value, l.env)
	if err != nil {
		l.errorf(e.pos, e.path, "%v", err)
		return scalar{}, false
	}
	s := scalar{text: text, raw: n.Value, tag: n.ShortTag(), secret: expanded}
	if expanded && n.Style&yaml.TaggedStyle == 0 {
		const quoted = yaml.DoubleQuotedStyle | yaml.SingleQuotedStyle | yaml.LiteralStyle | yaml.FoldedStyle
		if n.Style&quoted == 0 {
			s.tag = jsonTag(text)
		} else {
			s.tag = "!!str"
		}
	}
	return s, true
}

func jsonTag(text string) string {
	switch {
	case text == "true" || text == "false":
		return "!!bool"
	case text == "null":
		return "!!null"
	case isJSONNumber(text) && !strings.ContainsAny(text, ".eE"):
		return "!!int"
	case isJSONNumber(text):
		return "!!float"
	}
	return "!!str"
}

// str reads an optional string. Any non-null scalar is accepted as its text, so
// `version: 0.1` means the constraint "0.1".
func (o *object) str(key string) (string, scalar, entry, bool) {
	e, ok := o.get(key)
	if !ok {
		return "", scalar{}, e, false
	}
	s, ok := o.l.scalar(e, "a string")
	return s.text, s, e, ok
}

// needStr reads a required, non-empty string.
func (o *object) needStr(key string) (string, scalar, entry, bool) {
	e, ok := o.need(key)
	if !ok {
		return "", scalar{}, e, false
	}
	s, ok := o.l.scalar(e, "a string")
	if ok && strings.TrimSpace(s.text) == "" {
		o.l.errorf(e.pos, e.path, "must not be empty")
		ok = false
	}
	return s.text, s, e, ok
}

func (o *object) boolean(key string) (bool, entry, bool) {
	e, ok := o.get(key)
	if !ok {
		return false, e, false
	}
	s, ok := o.l.scalar(e, "true or false")
	if !ok {
		return false, e, false
	}
	if s.tag != "!!bool" {
		o.l.errorf(e.pos, e.path, "want true or false; got %s", s.show())
		return false, e, false
	}
	return strings.EqualFold(s.text, "true"), e, true
}

func (o *object) size(key string) (int64, entry, bool) {
	e, ok := o.get(key)
	if !ok {
		return 0, e, false
	}
	s, ok := o.l.scalar(e, "a size such as 8MiB")
	if !ok {
		return 0, e, false
	}
	n, err := parseSize(s.text)
	if err != nil {
		o.l.errorf(e.pos, e.path, "%s is not a size: %v", s.show(), s.redact(err))
		return 0, e, false
	}
	if n <= 0 {
		o.l.errorf(e.pos, e.path, "must be more than 0 bytes")
		return 0, e, false
	}
	return n, e, true
}

// count reads a whole number of at least 1.
func (o *object) count(key string) (int, entry, bool) {
	e, ok := o.get(key)
	if !ok {
		return 0, e, false
	}
	s, ok := o.l.scalar(e, "a whole number")
	if !ok {
		return 0, e, false
	}
	n, err := strconv.Atoi(strings.TrimSpace(s.text))
	if err != nil || s.tag != "!!int" {
		o.l.errorf(e.pos, e.path, "want a whole number such as 100; got %s", s.show())
		return 0, e, false
	}
	if n < 1 {
		o.l.errorf(e.pos, e.path, "must be at least 1")
		return 0, e, false
	}
	return n, e, true
}

func (o *object) duration(key string) (time.Duration, entry, bool) {
	e, ok := o.get(key)
	if !ok {
		return 0, e, false
	}
	s, ok := o.l.scalar(e, "a duration such as 200ms")
	if !ok {
		return 0, e, false
	}
	d, err := parseDuration(s.text)
	if err != nil {
		o.l.errorf(e.pos, e.path, "%s is not a duration: %v", s.show(), err)
		return 0, e, false
	}
	return d, e, true
}

// list returns the items of a sequence value as entries (path name[i]), recording
// their positions.
func (l *loader) list(e entry, want string) ([]entry, bool) {
	if isNull(e.val) {
		return nil, true
	}
	if e.val.Kind != yaml.SequenceNode {
		l.errorf(e.pos, e.path, "want %s; got %s", want, describe(e.val))
		return nil, false
	}
	out := make([]entry, len(e.val.Content))
	for i, it := range e.val.Content {
		p := indexKey(e.path, i)
		out[i] = entry{key: strconv.Itoa(i), path: p, pos: l.at(it), val: deref(it)}
		l.pos[p] = out[i].pos
	}
	return out, true
}

// listItem is one string of a list, with where it came from.
type listItem struct {
	entry
	s scalar
}

// stringList reads an optional list of non-empty, distinct strings. items holds the
// accepted ones, parallel to vals.
func (o *object) stringList(key, want string) (vals []string, items []listItem, ok bool) {
	e, ok := o.get(key)
	if !ok {
		return nil, nil, false
	}
	ents, ok := o.l.list(e, want)
	if !ok {
		return nil, nil, false
	}
	first := map[string]entry{}
	for _, it := range ents {
		s, ok := o.l.scalar(it, "a string")
		if !ok {
			continue
		}
		if strings.TrimSpace(s.text) == "" {
			o.l.errorf(it.pos, it.path, "must not be empty")
			continue
		}
		if f, dup := first[s.text]; dup {
			o.l.errorf(it.pos, it.path, "%s is listed twice (first at %s)", s.show(), f.path)
			continue
		}
		first[s.text] = it
		vals = append(vals, s.text)
		items = append(items, listItem{entry: it, s: s})
	}
	return vals, items, true
}

// settingValue turns an interpolated scalar into a JSON-compatible value: nil, bool,
// json.Number (exact digits, no float rounding) or string.
func settingValue(s scalar) (any, error) {
	decode := func(tag string, dst any) error {
		return (&yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: s.text}).Decode(dst)
	}
	switch s.tag {
	case "!!null":
		return nil, nil
	case "!!bool":
		switch strings.ToLower(s.text) {
		case "true":
			return true, nil
		case "false":
			return false, nil
		}
		return nil, fmt.Errorf("%s is not a boolean", s.show())
	case "!!int":
		var v any
		if err := decode("!!int", &v); err != nil {
			return nil, fmt.Errorf("%s is not an integer", s.show())
		}
		switch n := v.(type) {
		case int:
			return json.Number(strconv.FormatInt(int64(n), 10)), nil
		case int64:
			return json.Number(strconv.FormatInt(n, 10)), nil
		case uint64:
			return json.Number(strconv.FormatUint(n, 10)), nil
		}
		// yaml.v3 falls back to float64 beyond 64 bits; keep the digits exactly instead.
		if t := strings.TrimPrefix(strings.ReplaceAll(s.text, "_", ""), "+"); isJSONNumber(t) {
			return json.Number(t), nil
		}
		return nil, fmt.Errorf("%s is not an integer JSON can carry", s.show())
	case "!!float":
		if isJSONNumber(s.text) {
			return json.Number(s.text), nil
		}
		var f float64
		if err := decode("!!float", &f); err != nil {
			return nil, fmt.Errorf("%s is not a number", s.show())
		}
		if math.IsInf(f, 0) || math.IsNaN(f) {
			return nil, fmt.Errorf("%s cannot be represented in JSON", s.show())
		}
		return json.Number(strconv.FormatFloat(f, 'g', -1, 64)), nil
	case "!!str", "!!timestamp", "!!binary":
		// Timestamps stay as written; binary stays base64, JSON's usual spelling of bytes.
		return s.text, nil
	}
	return nil, fmt.Errorf("unsupported YAML tag %s", s.tag)
}
