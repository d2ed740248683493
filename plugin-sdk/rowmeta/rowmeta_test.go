package rowmeta

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
)

func TestOptions(t *testing.T) {
	cases := []struct {
		name string
		in   Settings
		want []Column
		err  string // substring of a config fault's message
	}{
		{name: "nothing", in: Settings{}},
		{name: "soft delete", in: Settings{SoftDelete: true}, want: []Column{{Deleted, Bool}}},
		{
			name: "every column, in a fixed order whatever the list's",
			in:   Settings{SoftDelete: true, MetadataColumns: []string{"position", "op", "source_committed_at", "synced_at"}},
			want: []Column{{Deleted, Bool}, {SyncedAt, Timestamp}, {SourceCommittedAt, Timestamp}, {Op, Text}, {Position, Int64}},
		},
		{name: "op alone", in: Settings{MetadataColumns: []string{"op"}}, want: []Column{{Op, Text}}},
		{name: "twice", in: Settings{MetadataColumns: []string{"op", "op"}}, err: `lists "op" twice`},
		{name: "unknown", in: Settings{MetadataColumns: []string{"synced"}}, err: `unknown column "synced"`},
		{name: "source commit time", in: Settings{MetadataColumns: []string{"source_committed_at"}}, want: []Column{{SourceCommittedAt, Timestamp}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o, err := tc.in.Options()
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, fault.ErrConfig) || fault.FixOf(err) == "" {
					t.Fatalf("err = %v, want a config fault with a fix containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := o.Columns(); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("columns %v, want %v", got, tc.want)
			}
			if o.Any() != (len(tc.want) > 0) {
				t.Errorf("Any() = %v with columns %v", o.Any(), tc.want)
			}
		})
	}
}

func TestCheckSchema(t *testing.T) {
	all := Options{SoftDelete: true, SyncedAt: true, Op: true, Position: true}
	schema := func(names ...string) *arrow.Schema {
		var fs []arrow.Field
		for _, n := range names {
			fs = append(fs, arrow.Field{Name: n, Type: arrow.PrimitiveTypes.Int64})
		}
		return change.Schema(fs, []string{"id"})
	}
	cases := []struct {
		name  string
		opt   Options
		s     *arrow.Schema
		clash string
	}{
		{name: "no clash", opt: all, s: schema("id", "v")},
		{name: "the protocol's op column is not a clash", opt: Options{Op: true}, s: schema("id")},
		{name: "deleted", opt: Options{SoftDelete: true}, s: schema("id", "_skippr_deleted"), clash: "_skippr_deleted"},
		{name: "case differs", opt: Options{SyncedAt: true}, s: schema("id", "_SKIPPR_SYNCED_AT"), clash: "_SKIPPR_SYNCED_AT"},
		{name: "position", opt: all, s: schema("id", "_skippr_position"), clash: "_skippr_position"},
		{name: "a column of a setting that is off", opt: Options{Op: true}, s: schema("id", "_skippr_deleted")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.opt.CheckSchema("public.t", tc.s)
			if tc.clash == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !errors.Is(err, fault.ErrConfig) || !strings.Contains(err.Error(), "table public.t has a column "+tc.clash) {
				t.Fatalf("err = %v, want a config fault naming table public.t and column %s", err, tc.clash)
			}
		})
	}
}

func TestOpName(t *testing.T) {
	want := map[change.Op]string{change.OpRead: "snapshot", change.OpInsert: "insert", change.OpUpdate: "update", change.OpDelete: "delete"}
	for op, w := range want {
		if got := OpName(op); got != w {
			t.Errorf("OpName(%v) = %q, want %q", op, got, w)
		}
	}
}

// TestSchemaProperties: the fragment destinations splice into their settings schemas is valid JSON Schema and
// takes what Options takes.
func TestSchemaProperties(t *testing.T) {
	doc := `{"type": "object", "additionalProperties": false, "properties": {` + SchemaProperties + `}}`
	var v any
	if err := json.Unmarshal([]byte(doc), &v); err != nil {
		t.Fatalf("SchemaProperties is not JSON: %v", err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("s.json", v); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("s.json")
	if err != nil {
		t.Fatal(err)
	}
	for in, ok := range map[string]bool{
		`{"soft_delete": true, "metadata_columns": ["synced_at", "op", "position"]}`: true,
		`{"metadata_columns": ["nope"]}`:                                             false,
		`{"soft_delete": "yes"}`:                                                     false,
	} {
		var x any
		_ = json.Unmarshal([]byte(in), &x)
		if err := sch.Validate(x); (err == nil) != ok {
			t.Errorf("%s: valid = %v, want %v (%v)", in, err == nil, ok, err)
		}
	}
}

func TestForStream(t *testing.T) {
	no, yes := false, true
	ops := []string{"op"}
	bad := []string{"nope"}
	base := Settings{SoftDelete: true, MetadataColumns: []string{"synced_at"}, TableOptions: map[string]TableSettings{
		"public.audit":  {SoftDelete: &no, History: &yes},
		"public.orders": {MetadataColumns: &ops},
	}}
	cases := []struct {
		name, stream string
		in           Settings
		want         Options
		err          string
	}{
		{name: "no override: the connection's", stream: "public.items", in: base, want: Options{SoftDelete: true, SyncedAt: true}},
		{name: "booleans overridden, columns kept", stream: "public.audit", in: base, want: Options{SyncedAt: true, History: true}},
		{name: "columns replaced whole", stream: "public.orders", in: base, want: Options{SoftDelete: true, Op: true}},
		{name: "connection history", stream: "x", in: Settings{History: true}, want: Options{History: true}},
		{name: "bad override names the stream", stream: "t", in: Settings{TableOptions: map[string]TableSettings{"t": {MetadataColumns: &bad}}}, err: `table_options.t: settings: metadata_columns: unknown column "nope"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o, err := tc.in.For(tc.stream)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, fault.ErrConfig) || fault.FixOf(err) == "" {
					t.Fatalf("For = %v, want a config fault with a fix containing %q", err, tc.err)
				}
				if tc.in.Check() == nil {
					t.Fatal("Check passed settings For refuses")
				}
				return
			}
			if err != nil || o != tc.want {
				t.Fatalf("For(%s) = %+v, %v; want %+v", tc.stream, o, err, tc.want)
			}
			if err := tc.in.Check(); err != nil {
				t.Fatalf("Check: %v", err)
			}
		})
	}
	if !(Settings{TableOptions: map[string]TableSettings{"t": {History: &yes}}}).AnyStream() || (Settings{}).AnyStream() {
		t.Fatal("AnyStream does not see an override")
	}
}

// The overrides' JSON: the key names users write, and a schema that takes them and refuses an unknown key.
func TestTableOptionsJSON(t *testing.T) {
	var s Settings
	if err := json.Unmarshal([]byte(`{"soft_delete": true, "table_options": {"a.b": {"soft_delete": false, "history": true, "metadata_columns": ["op"]}}}`), &s); err != nil {
		t.Fatal(err)
	}
	o, err := s.For("a.b")
	if err != nil || o != (Options{History: true, Op: true}) {
		t.Fatalf("For = %+v, %v", o, err)
	}
	schema := `{"type": "object", "additionalProperties": false, "properties": {` + SchemaProperties + `}}`
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("s.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("s.json")
	if err != nil {
		t.Fatal(err)
	}
	for in, ok := range map[string]bool{
		`{"history": true, "table_options": {"t": {"soft_delete": true}}}`: true,
		`{"table_options": {"t": {"where": "x"}}}`:                         false,
		`{"table_options": {"t": {"history": "yes"}}}`:                     false,
	} {
		v, _ := jsonschema.UnmarshalJSON(strings.NewReader(in))
		if err := sch.Validate(v); (err == nil) != ok {
			t.Errorf("%s: valid = %v, want %v (%v)", in, err == nil, ok, err)
		}
	}
}
