package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/skippr-dev/skippr/internal/suggest"
)

// schemaURL names the plugin's schema inside the compiler; nothing is fetched from it.
const schemaURL = "skippr:///plugin-settings.schema.json"

// ValidateSettings checks conn's settings against the plugin's JSON Schema (draft 2020-12
// when the schema does not say; draft-07 and the others are taken from "$schema"). Every
// violation is reported at the settings key it concerns, e.g.
//
//	skippr.yml:9:7: connections.gen.settings.rows: must be >= 1
//
// and all of them are returned together. Values that came from ${…} are never shown.
// The schema may not reference other documents.
func ValidateSettings(conn *Connection, schemaJSON []byte) error {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schemaJSON))
	if err != nil {
		return fmt.Errorf("connection %s: plugin %s settings schema: not JSON: %w", conn.Name, conn.Plugin, err)
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(jsonschema.SchemeURLLoader{}) // a plugin's schema must be self-contained
	if err := c.AddResource(schemaURL, doc); err != nil {
		return fmt.Errorf("connection %s: plugin %s settings schema: %w", conn.Name, conn.Plugin, err)
	}
	sch, err := c.Compile(schemaURL)
	if err != nil {
		return fmt.Errorf("connection %s: plugin %s settings schema: %w", conn.Name, conn.Plugin, err)
	}
	raw, err := conn.SettingsJSON()
	if err != nil {
		return err
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return fmt.Errorf("connection %s: settings: %w", conn.Name, err)
	}
	err = sch.Validate(inst)
	if err == nil {
		return nil
	}
	var verr *jsonschema.ValidationError
	if !errors.As(err, &verr) {
		return fmt.Errorf("connection %s: validate settings: %w", conn.Name, err)
	}
	root := conn.Settings.root
	if root == nil {
		root = &setting{kind: kindMap, pos: conn.Pos, path: "connections." + conn.Name + ".settings"}
	}
	v := violations{root: root, compiler: c}
	v.collect(verr)
	return joinErrors(v.errs)
}

var printer = message.NewPrinter(language.English)

type violations struct {
	root     *setting
	compiler *jsonschema.Compiler
	errs     []*Error
}

// collect reports the leaves of the error tree: the wrappers above them (allOf, $ref,
// the schema itself) only say "something below failed".
func (v *violations) collect(e *jsonschema.ValidationError) {
	if len(e.Causes) > 0 {
		for _, c := range e.Causes {
			v.collect(c)
		}
		return
	}
	node, rest := v.root.locate(e.InstanceLocation)
	path := node.path
	for _, tok := range rest { // not expected: the instance was built from this tree
		path = joinKey(path, tok)
	}
	add := func(at *setting, path, msg string) {
		v.errs = append(v.errs, &Error{Pos: at.pos, Key: path, Msg: msg})
	}
	switch k := e.ErrorKind.(type) {
	case *kind.AdditionalProperties:
		known := v.schemaProperties(e.SchemaURL)
		for _, p := range k.Properties {
			at := node
			if child, ok := node.fields[p]; ok && node.kind == kindMap {
				at = child
			}
			msg := "unknown setting"
			if s := suggest.Closest(p, known); s != "" {
				msg += fmt.Sprintf("; did you mean %q?", s)
			} else if len(known) > 0 {
				msg += fmt.Sprintf(" (known: %s)", strings.Join(known, ", "))
			}
			add(at, joinKey(path, p), msg)
		}
	case *kind.PropertyNames:
		at := node
		if child, ok := node.fields[k.Property]; ok && node.kind == kindMap {
			at = child
		}
		add(at, joinKey(path, k.Property), "key name not allowed by the plugin's schema")
	default:
		add(node, path, describeViolation(e.ErrorKind, node.secret))
	}
}

// schemaProperties lists the properties the failing object schema declares, for
// "did you mean" hints.
func (v *violations) schemaProperties(url string) []string {
	sch, err := v.compiler.Compile(url)
	if err != nil || sch == nil {
		return nil
	}
	var out []string
	for p := range sch.Properties {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// describeViolation words a schema violation for people. Kinds whose stock message
// quotes the offending value get their own wording so secrets stay hidden.
func describeViolation(k jsonschema.ErrorKind, secret bool) string {
	num := func(r *big.Rat) string {
		if r.IsInt() {
			return r.Num().String()
		}
		f, _ := r.Float64()
		return fmt.Sprint(f)
	}
	switch k := k.(type) {
	case *kind.Type:
		return fmt.Sprintf("must be %s, not %s", strings.Join(k.Want, " or "), k.Got)
	case *kind.Required:
		q := make([]string, len(k.Missing))
		for i, m := range k.Missing {
			q[i] = fmt.Sprintf("%q", m)
		}
		if len(q) == 1 {
			return "missing required setting " + q[0]
		}
		return "missing required settings " + strings.Join(q, ", ")
	case *kind.Minimum:
		return "must be >= " + num(k.Want)
	case *kind.Maximum:
		return "must be <= " + num(k.Want)
	case *kind.ExclusiveMinimum:
		return "must be > " + num(k.Want)
	case *kind.ExclusiveMaximum:
		return "must be < " + num(k.Want)
	case *kind.MultipleOf:
		return "must be a multiple of " + num(k.Want)
	case *kind.MinLength:
		return fmt.Sprintf("must be at least %d characters long", k.Want)
	case *kind.MaxLength:
		return fmt.Sprintf("must be at most %d characters long", k.Want)
	case *kind.MinItems:
		return fmt.Sprintf("must have at least %d items", k.Want)
	case *kind.MaxItems:
		return fmt.Sprintf("must have at most %d items", k.Want)
	case *kind.MinProperties:
		return fmt.Sprintf("must have at least %d keys", k.Want)
	case *kind.MaxProperties:
		return fmt.Sprintf("must have at most %d keys", k.Want)
	case *kind.Pattern:
		return fmt.Sprintf("does not match the pattern %q", k.Want)
	case *kind.Format:
		if secret {
			return fmt.Sprintf("is not a valid %s", k.Want)
		}
		return fmt.Sprintf("%q is not a valid %s", fmt.Sprint(k.Got), k.Want)
	case *kind.Enum:
		want := make([]string, len(k.Want))
		for i, w := range k.Want {
			want[i] = jsonText(w)
		}
		if len(want) == 1 {
			return "must be " + want[0]
		}
		return "must be one of " + strings.Join(want, ", ")
	case *kind.Const:
		return "must be " + jsonText(k.Want)
	case *kind.Dependency:
		return dependencyText(k.Prop, k.Missing)
	case *kind.DependentRequired:
		return dependencyText(k.Prop, k.Missing)
	case *kind.FalseSchema:
		return "is not allowed"
	case *kind.Not:
		return "matches a schema it must not match"
	case *kind.OneOf:
		return "matches more than one of the allowed alternatives (oneOf)"
	}
	return k.LocalizedString(printer)
}

func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func dependencyText(prop string, missing []string) string {
	q := make([]string, len(missing))
	for i, m := range missing {
		q[i] = fmt.Sprintf("%q", m)
	}
	return fmt.Sprintf("missing setting %s (required when %q is set)", strings.Join(q, ", "), prop)
}
