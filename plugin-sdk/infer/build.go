package infer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
)

// Row is one record to build: its op, its source position (for _skippr_pos; "" is null), when the source
// committed it (for _skippr_committed_at; the zero time is null) and its values.
type Row struct {
	Op        change.Op
	Pos       string
	Committed time.Time
	Value     map[string]any
}

// Build makes a change batch of schema (a change.Schema whose data fields follow this package's type mapping)
// from rows, coercing each value to its column's type: an integer into a float64 column (if float64 holds it
// exactly), and under WidenToString any value into a utf8 column as text. A value the schema cannot hold, a
// field the schema lacks, or a null in a non-nullable column fails the whole batch with an *Error naming the
// row and the field; evolve the schema with Evolve first. The caller releases the batch.
func Build(mem memory.Allocator, schema *arrow.Schema, rows []Row, opt Options) (arrow.RecordBatch, error) {
	all := schema.Fields()
	n := len(all)
	if n > 0 && all[n-1].Name == change.CommittedColumn {
		n--
	}
	if n < 2 || all[n-2].Name != change.OpColumn || all[n-1].Name != change.PosColumn {
		return nil, fmt.Errorf("build: schema is not a change schema (its last columns must be %s, %s and optionally %s)", change.OpColumn, change.PosColumn, change.CommittedColumn)
	}
	data := all[:n-2]
	fields, err := fromArrowFields(data, nil)
	if err != nil {
		return nil, fmt.Errorf("build: %w", err)
	}
	top := &node{kind: kindStruct, fields: fields}
	b := change.NewBuilder(mem, schema)
	defer b.Release()
	bl := builder{opt: opt}
	for i, r := range rows {
		bl.record = i
		if err := bl.unknownKeys(top, r.Value, nil); err != nil {
			return nil, err
		}
		for j, f := range fields {
			v := r.Value[f.name]
			if err := bl.append(b.Field(j), f.node, f.nullable, v, path{{key: f.name, idx: -1}}); err != nil {
				return nil, err
			}
		}
		b.RowAt(r.Op, r.Pos, r.Committed)
	}
	return b.NewBatch(), nil
}

type builder struct {
	opt    Options
	record int
}

func (bl *builder) fail(p path, format string, args ...any) error {
	return &Error{Record: bl.record, Path: p.pointer(), Reason: fmt.Sprintf(format, args...)}
}

// unknownKeys fails on the first key (in byte order) of m that struct n lacks.
func (bl *builder) unknownKeys(n *node, m map[string]any, p path) error {
	if len(m) <= len(n.fields) {
		missing := false
		for k := range m {
			if n.child(k) == nil {
				missing = true
				break
			}
		}
		if !missing {
			return nil
		}
	}
	var unknown []string
	for k := range m {
		if n.child(k) == nil {
			unknown = append(unknown, k)
		}
	}
	slices.Sort(unknown)
	return bl.fail(p.key(unknown[0]), "the schema has no such field (evolve the schema first)")
}

func (bl *builder) mismatch(n *node, v any, p path) error {
	return bl.fail(p, "cannot store %s in a %s column", describe(v), describeNode(n))
}

func (bl *builder) append(b array.Builder, n *node, nullable bool, v any, p path) error {
	if v == nil {
		if !nullable {
			return bl.fail(p, "required (the column is not nullable), but null or missing")
		}
		b.AppendNull()
		return nil
	}
	switch n.kind {
	case kindNull:
		return bl.fail(p, "the column has held only nulls and cannot store %s (evolve the schema first)", describe(v))
	case kindBool:
		x, ok := v.(bool)
		if !ok {
			return bl.mismatch(n, v, p)
		}
		b.(*array.BooleanBuilder).Append(x)
	case kindInt:
		x, ok := intValue(v)
		if !ok {
			return bl.mismatch(n, v, p)
		}
		b.(*array.Int64Builder).Append(x)
	case kindFloat:
		x, ok := floatValue(v)
		if !ok {
			return bl.mismatch(n, v, p)
		}
		b.(*array.Float64Builder).Append(x)
	case kindString:
		s, ok := bl.stringValue(v)
		if !ok {
			return bl.mismatch(n, v, p)
		}
		b.(*array.StringBuilder).Append(s)
	case kindTimestamp:
		s, ok := v.(string)
		if !ok {
			return bl.mismatch(n, v, p)
		}
		t, ok := parseTimestamp(s)
		if !ok {
			return bl.mismatch(n, v, p)
		}
		b.(*array.TimestampBuilder).Append(arrow.Timestamp(t.UnixMicro()))
	case kindStruct:
		m, ok := v.(map[string]any)
		if !ok {
			return bl.mismatch(n, v, p)
		}
		if err := bl.unknownKeys(n, m, p); err != nil {
			return err
		}
		sb := b.(*array.StructBuilder)
		sb.Append(true)
		for i, f := range n.fields {
			if err := bl.append(sb.FieldBuilder(i), f.node, f.nullable, m[f.name], p.key(f.name)); err != nil {
				return err
			}
		}
	case kindList:
		l, ok := v.([]any)
		if !ok {
			return bl.mismatch(n, v, p)
		}
		lb := b.(*array.ListBuilder)
		lb.Append(true)
		vb := lb.ValueBuilder()
		for i, x := range l {
			if err := bl.append(vb, n.elem, true, x, p.index(i)); err != nil {
				return err
			}
		}
	default:
		return bl.fail(p, "unknown column kind %s", n.kind)
	}
	return nil
}

// intValue returns v as an int64 if it is an integer that fits.
func intValue(v any) (int64, bool) {
	switch v := v.(type) {
	case json.Number:
		s := v.String()
		if strings.ContainsAny(s, ".eE") {
			return 0, false
		}
		n, err := strconv.ParseInt(s, 10, 64)
		return n, err == nil
	case int:
		return int64(v), true
	case int64:
		return v, true
	}
	return 0, false
}

// floatValue returns v as a float64 if float64 holds it as written: any finite number with a fraction or
// exponent, an integer only up to ±2^53.
func floatValue(v any) (float64, bool) {
	switch v := v.(type) {
	case json.Number:
		k, big, err := classifyNumber(v.String())
		if err != nil || big || (k != kindInt && k != kindFloat) {
			return 0, false
		}
		f, err := strconv.ParseFloat(v.String(), 64)
		return f, err == nil
	case float64:
		return v, true
	case int:
		return float64(v), v <= maxExactInt && v >= -maxExactInt
	case int64:
		return float64(v), v <= maxExactInt && v >= -maxExactInt
	}
	return 0, false
}

// stringValue returns the text a utf8 column stores for v: a string as itself, a number that no numeric type
// holds as its JSON text, and under WidenToString anything else as its JSON text.
func (bl *builder) stringValue(v any) (string, bool) {
	switch v := v.(type) {
	case string:
		return v, true
	case json.Number:
		if k, _, err := classifyNumber(v.String()); err == nil && k == kindString {
			return v.String(), true
		}
	}
	if bl.opt.Conflict != WidenToString {
		return "", false
	}
	s, err := Text(v)
	return s, err == nil
}

// Text returns the text WidenToString stores for a value: a string as itself, a number as its JSON text, a
// boolean as true or false, an object or array as its compact JSON (keys sorted, no HTML escaping).
func Text(v any) (string, error) {
	switch v := v.(type) {
	case string:
		return v, nil
	case json.Number:
		return v.String(), nil
	case bool:
		return strconv.FormatBool(v), nil
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64), nil
	case int:
		return strconv.Itoa(v), nil
	case int64:
		return strconv.FormatInt(v, 10), nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", fmt.Errorf("encode %s as JSON: %w", describe(v), err)
	}
	return strings.TrimSuffix(buf.String(), "\n"), nil
}
