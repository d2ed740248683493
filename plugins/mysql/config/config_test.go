package config

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// TestZeroDateNull: `zero_date: null` unquoted in YAML reaches the plugin as JSON null and means the value
// null, as the quoted word does; an absent key keeps the default; anything else is refused.
func TestZeroDateNull(t *testing.T) {
	base := `"host": "h", "user": "u", "database": "d", "tables": ["t"]`
	for _, tc := range []struct {
		name, json string
		want       ZeroDate
		ok         bool
	}{
		{"absent", `{` + base + `}`, ZeroDateError, true},
		{"YAML null", `{` + base + `, "zero_date": null}`, ZeroDateNull, true},
		{"the word null", `{` + base + `, "zero_date": "null"}`, ZeroDateNull, true},
		{"error", `{` + base + `, "zero_date": "error"}`, ZeroDateError, true},
		{"misspelt", `{` + base + `, "zero_date": "nul"}`, "", false},
		{"a number", `{` + base + `, "zero_date": 0}`, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse(json.RawMessage(tc.json))
			if (err == nil) != tc.ok {
				t.Fatalf("Parse(%s): %v, want ok=%v", tc.json, err, tc.ok)
			}
			if tc.ok && s.ZeroDate != tc.want {
				t.Fatalf("zero_date %q, want %q", s.ZeroDate, tc.want)
			}
		})
	}
	// The engine validates settings against the schema before the plugin sees them: it must let null through.
	var sch struct {
		Properties map[string]struct {
			Enum []any `json:"enum"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(Schema, &sch); err != nil {
		t.Fatal(err)
	}
	if enum := sch.Properties["zero_date"].Enum; !slices.Contains(enum, any(nil)) || !slices.Contains(enum, any("null")) {
		t.Fatalf("the schema's zero_date enum %v does not accept YAML null", enum)
	}
}

// TestTableOptions: exclude_columns and hash_columns are compiled by stream name (database.table); a table not in
// tables and an empty salt are refused, naming table and column.
func TestTableOptions(t *testing.T) {
	base := `"host": "h", "user": "u", "database": "d", "tables": ["t", "u"]`
	for _, tc := range []struct {
		name, opts, err string
	}{
		{"ok", `{"t": {"exclude_columns": ["ssn"], "hash_columns": {"email": {"salt": "s3cret"}}}}`, ""},
		{"unknown table", `{"x": {"exclude_columns": ["ssn"]}}`, "table_options names x, which is not in tables"},
		{"empty salt", `{"t": {"hash_columns": {"email": {"salt": ""}}}}`, "table_options.d.t.hash_columns.email.salt is empty"},
		{"unknown option", `{"t": {"exclude": ["ssn"]}}`, "unknown field"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse(json.RawMessage(`{` + base + `, "table_options": ` + tc.opts + `}`))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !s.Protect.Hides("d.t", "ssn") || !s.Protect.Hides("d.t", "email") || s.Protect.Protects("d.u") {
				t.Fatalf("rules not compiled by stream name")
			}
		})
	}
}
