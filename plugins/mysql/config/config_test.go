package config

import (
	"encoding/json"
	"hash/fnv"
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
		{"ok", `{"t": {"exclude_columns": ["ssn"], "hash_columns": {"email": {"salt": "s3cret"}}, "mode": "full_row"}}`, ""},
		{"unknown table", `{"x": {"exclude_columns": ["ssn"]}}`, "table_options names x, which is not in tables"},
		{"empty salt", `{"t": {"hash_columns": {"email": {"salt": ""}}}}`, "table_options.d.t.hash_columns.email.salt is empty"},
		{"unknown option", `{"t": {"exclude": ["ssn"]}}`, "unknown field"},
		{"unknown mode", `{"t": {"mode": "append"}}`, `table_options.t.mode "append" is not full_row`},
		{"key_columns", `{"t": {"mode": "full_row", "key_columns": ["id"]}}`, "unknown field"},
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
			if !s.FullRow("t") && strings.Contains(tc.opts, "full_row") {
				t.Fatalf("mode full_row not read")
			}
			if !s.Protect.Hides("d.t", "ssn") || !s.Protect.Hides("d.t", "email") || s.Protect.Protects("d.u") {
				t.Fatalf("rules not compiled by stream name")
			}
		})
	}
}

// TestServerIDFromPipeline: two pipelines over the same tables derive different server_ids (the same one evicts
// the other's binlog dump); one pipeline derives the same id at every start; an engine that sends no pipeline
// name gets the id derived before names were; a server_id in the settings wins over any derivation.
func TestServerIDFromPipeline(t *testing.T) {
	base := `{"host": "h", "port": 3306, "user": "u", "database": "d", "tables": ["a", "b"]`
	id := func(settings, pipeline string) (uint32, bool) {
		t.Helper()
		s, err := ParseFor(json.RawMessage(settings), pipeline)
		if err != nil {
			t.Fatal(err)
		}
		return s.ServerID, s.ServerIDDerived
	}
	orders, derived := id(base+`}`, "orders")
	if !derived {
		t.Fatal("an unset server_id is not marked as derived")
	}
	audit, _ := id(base+`}`, "audit")
	if orders == audit {
		t.Fatalf("pipelines orders and audit over the same tables both derive server_id %d", orders)
	}
	if again, _ := id(base+`}`, "orders"); again != orders {
		t.Fatalf("pipeline orders derives %d, then %d: a restart must reuse its id", orders, again)
	}
	for _, v := range []uint32{orders, audit} {
		if v < 1_000_000 || v >= 2_000_000 {
			t.Fatalf("derived server_id %d outside 1000000..1999999", v)
		}
	}
	// Before pipeline names: FNV-1a 32 of "h:3306/d/a,b", mod 10^6, plus 10^6 — the id those pipelines use.
	h := fnv.New32a()
	h.Write([]byte("h:3306/d/a,b"))
	if old, _ := id(base+`}`, ""); old != 1_000_000+h.Sum32()%1_000_000 {
		t.Fatalf("without a pipeline name server_id %d, want the old derivation %d", old, 1_000_000+h.Sum32()%1_000_000)
	}
	if set, derived := id(base+`, "server_id": 77}`, "orders"); set != 77 || derived {
		t.Fatalf("server_id 77 in the settings gave %d (derived %v)", set, derived)
	}
}

// TestTablePatterns: entries with `*` or `?` are patterns, the others exact names as before; Expand adds the
// matching tables after the exact ones, in name order, and refuses at a first start a pattern matching nothing.
func TestTablePatterns(t *testing.T) {
	existing := []string{"orders_2025", "orders_2024", "Orders_X", "items", "audit", "x*y"}
	for _, tc := range []struct {
		name     string
		tables   string
		opts     string
		first    bool
		want     []string
		parseErr string
		err      string
	}{
		{name: "exact only", tables: `["items", "audit"]`, first: true, want: []string{"items", "audit"}},
		{name: "pattern after exact", tables: `["audit", "orders_*"]`, first: true, want: []string{"audit", "orders_2024", "orders_2025"}},
		{name: "case-sensitive", tables: `["orders_?"]`, first: true, want: nil, err: "pattern orders_? matches no table of database d"},
		{name: "question mark", tables: `["orders_202?"]`, first: true, want: []string{"orders_2024", "orders_2025"}},
		{name: "exact also matched", tables: `["orders_2025", "orders_*"]`, first: true, want: []string{"orders_2025", "orders_2024"}},
		{name: "all", tables: `["*"]`, first: true, want: []string{"Orders_X", "audit", "items", "orders_2024", "orders_2025", "x*y"}},
		{name: "no match at first start", tables: `["items", "shop_*"]`, first: true, err: "pattern shop_* matches no table"},
		{name: "no match later", tables: `["items", "shop_*"]`, first: false, want: []string{"items"}},
		{name: "options for a matched name", tables: `["orders_*"]`, opts: `{"orders_2030": {"exclude_columns": ["x"]}}`, first: true, want: []string{"orders_2024", "orders_2025"}},
		{name: "options for an unmatched name", tables: `["orders_*"]`, opts: `{"items": {"exclude_columns": ["x"]}}`, parseErr: "table_options names items, which is not in tables"},
		{name: "pattern with a dot", tables: `["shop.*"]`, parseErr: "without quotes or a database prefix"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw := `{"host": "h", "user": "u", "database": "d", "tables": ` + tc.tables
			if tc.opts != "" {
				raw += `, "table_options": ` + tc.opts
			}
			s, err := Parse(json.RawMessage(raw + `}`))
			if tc.parseErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.parseErr) {
					t.Fatalf("Parse: %v, want %q", err, tc.parseErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			err = s.Expand(existing, tc.first)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Expand: %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(s.Tables, tc.want) && !(len(s.Tables) == 0 && len(tc.want) == 0) {
				t.Fatalf("tables %q, want %q", s.Tables, tc.want)
			}
		})
	}
	// The derived server id hashes the setting as written: expanding the patterns does not move it.
	s, err := ParseFor(json.RawMessage(`{"host": "h", "user": "u", "database": "d", "tables": ["orders_*"]}`), "p")
	if err != nil {
		t.Fatal(err)
	}
	id := s.ServerID
	if err := s.Expand(existing, true); err != nil {
		t.Fatal(err)
	}
	if again, _ := ParseFor(json.RawMessage(`{"host": "h", "user": "u", "database": "d", "tables": ["orders_*"]}`), "p"); again.ServerID != id {
		t.Fatalf("server id %d, then %d", id, again.ServerID)
	}
}
