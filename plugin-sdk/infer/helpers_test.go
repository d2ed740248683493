package infer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// sig renders fields compactly: name:type, "?" when nullable, "null" for a null-only field, "int64!" for an
// int64 field that has held integers beyond ±2^53, {…} for structs, […] for lists.
func sig(fs []arrow.Field) string {
	parts := make([]string, len(fs))
	for i, f := range fs {
		parts[i] = f.Name + ":" + typeSig(f.Type, f.Metadata)
		if f.Nullable {
			parts[i] += "?"
		}
	}
	return strings.Join(parts, ", ")
}

func typeSig(t arrow.DataType, md arrow.Metadata) string {
	mark, _ := md.GetValue(MetaKey)
	switch t := t.(type) {
	case *arrow.StringType:
		if mark == metaNull {
			return "null"
		}
		return "utf8"
	case *arrow.Int64Type:
		if mark == metaBigInt {
			return "int64!"
		}
		return "int64"
	case *arrow.TimestampType:
		return "ts"
	case *arrow.StructType:
		return "{" + sig(t.Fields()) + "}"
	case *arrow.ListType:
		return "[" + typeSig(t.Elem(), t.ElemField().Metadata) + "]"
	}
	return t.String()
}

// decodeNDJSON decodes one object per line, as a source would.
func decodeNDJSON(s string) ([]map[string]any, error) {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var out []map[string]any
	for {
		var m map[string]any
		err := dec.Decode(&m)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if m == nil {
			return nil, fmt.Errorf("record %d is null", len(out))
		}
		out = append(out, m)
	}
}

func mustNDJSON(s string) []map[string]any {
	recs, err := decodeNDJSON(s)
	if err != nil {
		panic(fmt.Sprintf("test input %q: %v", s, err))
	}
	return recs
}

// toGo converts row i of a column back to the Go values encoding/json produces (numbers as int64 or float64,
// timestamps as time.Time).
func toGo(a arrow.Array, i int) any {
	if a.IsNull(i) {
		return nil
	}
	switch a := a.(type) {
	case *array.Boolean:
		return a.Value(i)
	case *array.Int64:
		return a.Value(i)
	case *array.Float64:
		return a.Value(i)
	case *array.String:
		return a.Value(i)
	case *array.Timestamp:
		return time.UnixMicro(int64(a.Value(i))).UTC()
	case *array.Struct:
		st := a.DataType().(*arrow.StructType)
		m := map[string]any{}
		for j := 0; j < a.NumField(); j++ {
			m[st.Field(j).Name] = toGo(a.Field(j), i)
		}
		return m
	case *array.List:
		start, end := a.ValueOffsets(i)
		out := []any{}
		for k := start; k < end; k++ {
			out = append(out, toGo(a.ListValues(), int(k)))
		}
		return out
	}
	panic(fmt.Sprintf("toGo: unexpected array %T", a))
}

// rowsToGo returns the data columns of every row of a change batch.
func rowsToGo(rec arrow.RecordBatch) []map[string]any {
	out := make([]map[string]any, rec.NumRows())
	for i := range out {
		out[i] = map[string]any{}
		for j, f := range rec.Schema().Fields() {
			if strings.HasPrefix(f.Name, "_skippr_") {
				continue
			}
			out[i][f.Name] = toGo(rec.Column(j), i)
		}
	}
	return out
}

// sameValue checks that out (from Arrow) keeps the non-null JSON value in, as the documented type mapping
// says it must: numbers exactly (an integer stored as float64 only if float64 holds it exactly), timestamps as
// the same instant, and values widened to text as their JSON text.
func sameValue(in, out any, at string) error {
	if in == nil {
		return nil
	}
	if out == nil {
		return fmt.Errorf("%s: %v became null", at, in)
	}
	if s, ok := out.(string); ok {
		switch in.(type) {
		case string:
			if s != in {
				return fmt.Errorf("%s: string %q became %q", at, in, s)
			}
			return nil
		case json.Number, bool:
			if want := fmt.Sprint(in); s != want {
				return fmt.Errorf("%s: %v became text %q", at, in, s)
			}
			return nil
		}
		// An object or array stored as text: its JSON must decode to the same value.
		dec := json.NewDecoder(strings.NewReader(s))
		dec.UseNumber()
		var back any
		if err := dec.Decode(&back); err != nil {
			return fmt.Errorf("%s: %v became text %q that is not JSON: %v", at, in, s, err)
		}
		if !reflect.DeepEqual(normalize(in), normalize(back)) {
			return fmt.Errorf("%s: %v became text %q", at, in, s)
		}
		return nil
	}
	switch v := in.(type) {
	case bool:
		if out != v {
			return fmt.Errorf("%s: %v became %v", at, v, out)
		}
	case string:
		tm, ok := out.(time.Time)
		want, err := time.Parse(time.RFC3339Nano, v)
		if !ok || err != nil || !tm.Equal(want) {
			return fmt.Errorf("%s: %q became %v", at, v, out)
		}
	case json.Number:
		switch o := out.(type) {
		case int64:
			if v.String() != strconv.FormatInt(o, 10) && !(v.String() == "-0" && o == 0) {
				return fmt.Errorf("%s: %s became int64 %d", at, v, o)
			}
		case float64:
			if n, err := strconv.ParseInt(v.String(), 10, 64); err == nil {
				if float64(n) != o || n > 1<<53 || n < -(1<<53) {
					return fmt.Errorf("%s: integer %s became float64 %v", at, v, o)
				}
				return nil
			}
			f, err := strconv.ParseFloat(v.String(), 64)
			if err != nil || f != o || math.IsInf(o, 0) {
				return fmt.Errorf("%s: %s became float64 %v", at, v, o)
			}
		default:
			return fmt.Errorf("%s: number %s became %T %v", at, v, out, out)
		}
	case map[string]any:
		o, ok := out.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: object became %T", at, out)
		}
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if err := sameValue(v[k], o[k], at+"/"+k); err != nil {
				return err
			}
		}
	case []any:
		o, ok := out.([]any)
		if !ok || len(o) != len(v) {
			return fmt.Errorf("%s: array of %d became %v", at, len(v), out)
		}
		for i := range v {
			if err := sameValue(v[i], o[i], fmt.Sprintf("%s/%d", at, i)); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("%s: unexpected input %T", at, in)
	}
	return nil
}

// normalize re-encodes a JSON value so numbers compare by text after a round trip.
func normalize(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		return err.Error()
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var out any
	if err := dec.Decode(&out); err != nil {
		return err.Error()
	}
	return out
}

// missingPath returns the JSON pointer of the first field of m (recursively) the fields do not hold, or "".
// A value under a utf8 column is held as text.
func missingPath(fs []arrow.Field, m map[string]any, at string) string {
	for k, v := range m {
		var f *arrow.Field
		for i := range fs {
			if fs[i].Name == k {
				f = &fs[i]
			}
		}
		if f == nil {
			return at + "/" + k
		}
		if p := missingIn(f.Type, v, at+"/"+k); p != "" {
			return p
		}
	}
	return ""
}

func missingIn(t arrow.DataType, v any, at string) string {
	switch v := v.(type) {
	case map[string]any:
		if st, ok := t.(*arrow.StructType); ok {
			return missingPath(st.Fields(), v, at)
		}
	case []any:
		if lt, ok := t.(*arrow.ListType); ok {
			for i, x := range v {
				if p := missingIn(lt.Elem(), x, fmt.Sprintf("%s/%d", at, i)); p != "" {
					return p
				}
			}
			return ""
		}
	default:
		return ""
	}
	if _, ok := t.(*arrow.StringType); ok {
		return ""
	}
	return at + " (as " + t.String() + ")"
}
