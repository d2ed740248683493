package infer

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
)

// Conflict says what happens when a field meets a value that no widening rule reconciles with its type.
type Conflict int

const (
	// WidenToString makes the field utf8 and keeps every value as text. It is the default.
	WidenToString Conflict = iota
	// Reject fails with an *Error naming the record and the field.
	Reject
)

func (c Conflict) String() string {
	if c == Reject {
		return "reject"
	}
	return "string"
}

// Options control inference and building.
type Options struct {
	Conflict Conflict
}

// Infer returns data fields that hold every record.
func Infer(records []map[string]any, opt Options) ([]arrow.Field, error) {
	fs, _, err := Evolve(nil, records, opt)
	return fs, err
}

// Evolve returns data fields that hold the current fields' data and every record: new fields appended (at the
// top level and inside structs), types widened. changed reports whether they differ from current. current
// holds data fields only (change.DataFields of a change schema) and is not modified. Nothing is returned but
// the error when a record cannot be taken: a caller applies all of a batch of records or none.
func Evolve(current []arrow.Field, records []map[string]any, opt Options) ([]arrow.Field, bool, error) {
	for _, f := range current {
		if strings.HasPrefix(f.Name, change.ReservedPrefix) {
			return nil, false, fmt.Errorf("current schema: %s is a change-protocol column; pass the data fields only (change.DataFields)", f.Name)
		}
	}
	cur, err := fromArrowFields(current, nil)
	if err != nil {
		return nil, false, fmt.Errorf("current schema: %w", err)
	}
	before := &node{kind: kindStruct, fields: cur}
	root := before.clone()
	e := evolver{opt: opt}
	for i, rec := range records {
		e.record = i
		if err := e.absorbObject(root, rec, nil, 0); err != nil {
			return nil, false, err
		}
	}
	return toArrowFields(root.fields), !equalNode(before, root), nil
}

// Merge returns data fields that hold the data of both a and b: b's fields joined into a's by the same rules
// as values (a field present in only one of them becomes nullable). changed reports whether the result
// differs from a.
func Merge(a, b []arrow.Field, opt Options) ([]arrow.Field, bool, error) {
	na, err := fromArrowFields(a, nil)
	if err != nil {
		return nil, false, fmt.Errorf("merge: %w", err)
	}
	nb, err := fromArrowFields(b, nil)
	if err != nil {
		return nil, false, fmt.Errorf("merge: %w", err)
	}
	before := &node{kind: kindStruct, fields: na}
	e := evolver{opt: opt, record: -1}
	merged, err := e.join(before.clone(), &node{kind: kindStruct, fields: nb}, nil)
	if err != nil {
		return nil, false, err
	}
	return toArrowFields(merged.fields), !equalNode(before, merged), nil
}

// seg is one step of a path: an object key, or an array index when idx >= 0.
type seg struct {
	key string
	idx int
}

type path []seg

func (p path) key(k string) path { return append(p[:len(p):len(p)], seg{key: k, idx: -1}) }
func (p path) index(i int) path  { return append(p[:len(p):len(p)], seg{idx: i}) }

func (p path) pointer() string {
	s := make([]string, len(p))
	for i, x := range p {
		if x.idx >= 0 {
			s[i] = strconv.Itoa(x.idx)
		} else {
			s[i] = x.key
		}
	}
	return Pointer(s)
}

type evolver struct {
	opt    Options
	record int
}

func (e *evolver) fail(p path, format string, args ...any) error {
	return &Error{Record: e.record, Path: p.pointer(), Reason: fmt.Sprintf(format, args...)}
}

// absorbObject widens struct n to hold object m. New keys are added in byte order of their names.
func (e *evolver) absorbObject(n *node, m map[string]any, p path, depth int) error {
	if depth >= MaxDepth {
		return e.fail(p, "objects and arrays nest deeper than %d levels", MaxDepth)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if depth == 0 && strings.HasPrefix(k, change.ReservedPrefix) {
			return e.fail(p.key(k), "names starting with %q are reserved for the change protocol", change.ReservedPrefix)
		}
		v := m[k]
		f := n.child(k)
		if f == nil {
			f = &field{name: k, nullable: true}
			n.fields = append(n.fields, f)
		}
		if v == nil {
			f.nullable = true
		}
		nn, err := e.absorb(f.node, v, p.key(k), depth+1)
		if err != nil {
			return err
		}
		f.node = nn
	}
	for _, f := range n.fields {
		if _, ok := m[f.name]; !ok {
			f.nullable = true
		}
	}
	return nil
}

// absorb returns the type that holds both cur (nil: not seen yet) and v. It may modify cur.
func (e *evolver) absorb(cur *node, v any, p path, depth int) (*node, error) {
	switch v := v.(type) {
	case nil:
		if cur == nil {
			return &node{kind: kindNull}, nil
		}
		return cur, nil
	case map[string]any:
		switch {
		case cur == nil || cur.kind == kindNull:
			cur = &node{kind: kindStruct}
		case cur.kind != kindStruct:
			return e.conflict(cur, &node{kind: kindStruct}, describe(v), p)
		}
		return cur, e.absorbObject(cur, v, p, depth)
	case []any:
		if depth >= MaxDepth {
			return nil, e.fail(p, "objects and arrays nest deeper than %d levels", MaxDepth)
		}
		switch {
		case cur == nil || cur.kind == kindNull:
			cur = &node{kind: kindList}
		case cur.kind != kindList:
			return e.conflict(cur, &node{kind: kindList}, describe(v), p)
		}
		for i, x := range v {
			el, err := e.absorb(cur.elem, x, p.index(i), depth+1)
			if err != nil {
				return nil, err
			}
			cur.elem = el
		}
		if cur.elem == nil {
			cur.elem = &node{kind: kindNull}
		}
		return cur, nil
	}
	s, err := scalar(v)
	if err != nil {
		return nil, e.fail(p, "%v", err)
	}
	if cur == nil {
		return s, nil
	}
	return e.joinScalar(cur, s, describe(v), p)
}

// joinScalar joins a scalar type s into cur.
func (e *evolver) joinScalar(cur, s *node, what string, p path) (*node, error) {
	switch {
	case cur.kind == kindNull:
		return s, nil
	case cur.kind == s.kind:
		cur.big = cur.big || s.big
		return cur, nil
	case cur.kind == kindFloat && s.kind == kindInt && !s.big, cur.kind == kindInt && s.kind == kindFloat && !cur.big:
		return &node{kind: kindFloat}, nil
	case cur.kind == kindTimestamp && s.kind == kindString, cur.kind == kindString && s.kind == kindTimestamp:
		return &node{kind: kindString}, nil
	}
	return e.conflict(cur, s, what, p)
}

// join joins schema type b into a (both complete types, as in Merge). It may modify a.
func (e *evolver) join(a, b *node, p path) (*node, error) {
	switch {
	case b.kind == kindNull:
		return a, nil
	case a.kind == kindStruct && b.kind == kindStruct:
		for _, fb := range b.fields {
			fa := a.child(fb.name)
			if fa == nil {
				a.fields = append(a.fields, &field{name: fb.name, nullable: true, node: fb.node.clone()})
				continue
			}
			fa.nullable = fa.nullable || fb.nullable
			n, err := e.join(fa.node, fb.node, p.key(fb.name))
			if err != nil {
				return nil, err
			}
			fa.node = n
		}
		for _, fa := range a.fields {
			if b.child(fa.name) == nil {
				fa.nullable = true
			}
		}
		return a, nil
	case a.kind == kindList && b.kind == kindList:
		el, err := e.join(a.elem, b.elem, p.index(0))
		if err != nil {
			return nil, err
		}
		a.elem = el
		return a, nil
	case a.kind == kindNull:
		return b.clone(), nil
	case a.kind == kindStruct || a.kind == kindList || b.kind == kindStruct || b.kind == kindList:
		return e.conflict(a, b, b.kind.String(), p)
	}
	return e.joinScalar(a, b, b.kind.String(), p)
}

// conflict resolves a clash no widening rule covers.
func (e *evolver) conflict(cur, in *node, what string, p path) (*node, error) {
	if e.opt.Conflict == WidenToString {
		return &node{kind: kindString}, nil
	}
	reason := fmt.Sprintf("type conflict: the field is %s, the value is %s", describeNode(cur), what)
	if in.kind == kindString && strings.HasPrefix(what, "the number") {
		reason += " (a number beyond int64 or float64 can only be kept as text)"
	}
	return nil, e.fail(p, "%s; only widening to string (the string conflict policy) could hold both", reason)
}

func describeNode(n *node) string {
	if n.kind == kindInt && n.big {
		return "int64 holding integers beyond ±2^53, which float64 would round"
	}
	return n.kind.String()
}

// describe names a value for an error message without quoting what may be a large value.
func describe(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case string:
		if _, ok := parseTimestamp(v); ok {
			return "a timestamp string"
		}
		return "a string"
	case json.Number:
		s := v.String()
		if len(s) > 40 {
			s = s[:40] + "…"
		}
		return "the number " + s
	case float64, int, int64:
		return fmt.Sprintf("the number %v", v)
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	}
	return fmt.Sprintf("a Go %T", v)
}

// scalar returns the type of a scalar value.
func scalar(v any) (*node, error) {
	switch v := v.(type) {
	case bool:
		return &node{kind: kindBool}, nil
	case string:
		if _, ok := parseTimestamp(v); ok {
			return &node{kind: kindTimestamp}, nil
		}
		return &node{kind: kindString}, nil
	case json.Number:
		k, big, err := classifyNumber(v.String())
		if err != nil {
			return nil, err
		}
		return &node{kind: k, big: big}, nil
	case float64:
		return &node{kind: kindFloat}, nil
	case int:
		return &node{kind: kindInt, big: v > maxExactInt || v < -maxExactInt}, nil
	case int64:
		return &node{kind: kindInt, big: v > maxExactInt || v < -maxExactInt}, nil
	}
	return nil, fmt.Errorf("unsupported Go value of type %T (decode JSON into map[string]any with UseNumber)", v)
}

// classifyNumber types a JSON number by how it is written: integers are int64 when they fit, numbers with a
// fraction or exponent are float64 when finite; a number neither holds exactly is text.
func classifyNumber(s string) (k kind, big bool, err error) {
	if !strings.ContainsAny(s, ".eE") {
		n, err := strconv.ParseInt(s, 10, 64)
		if err == nil {
			return kindInt, n > maxExactInt || n < -maxExactInt, nil
		}
		if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
			return kindString, false, nil
		}
		return 0, false, fmt.Errorf("%q is not a JSON number", s)
	}
	f, err := strconv.ParseFloat(s, 64)
	if err == nil && !math.IsInf(f, 0) {
		return kindFloat, false, nil
	}
	if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
		return kindString, false, nil
	}
	return 0, false, fmt.Errorf("%q is not a JSON number", s)
}

// parseTimestamp accepts RFC 3339 date-times with at most microsecond precision: the instant then fits
// timestamp[us] without losing a digit. time.Parse alone is laxer than RFC 3339 (it takes a comma before
// the fraction), so the shape is checked first.
func parseTimestamp(s string) (time.Time, bool) {
	if len(s) < 20 || len(s) > 32 || s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':' {
		return time.Time{}, false
	}
	for _, i := range []int{0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18} {
		if s[i] < '0' || s[i] > '9' {
			return time.Time{}, false
		}
	}
	rest := s[19:]
	if rest[0] == '.' {
		d := 1
		for d < len(rest) && rest[d] >= '0' && rest[d] <= '9' {
			d++
		}
		if d == 1 || d-1 > 6 {
			return time.Time{}, false
		}
		rest = rest[d:]
	}
	switch {
	case rest == "Z":
	case len(rest) == 6 && (rest[0] == '+' || rest[0] == '-') && rest[3] == ':' &&
		isDigits(rest[1:3]) && isDigits(rest[4:6]):
	default:
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, false
	}
	return t, true
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
