package config

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/rowmeta"
	"github.com/skippr-dev/skippr/plugin-sdk/values"
)

func TestParseTableName(t *testing.T) {
	for _, tc := range []struct {
		in, schema, name, err string
	}{
		{in: "users", schema: "public", name: "users"},
		{in: "Sales.Orders", schema: "sales", name: "orders"},
		{in: `"Sales"."Order.Lines"`, schema: "Sales", name: "Order.Lines"},
		{in: `app."say ""hi"""`, schema: "app", name: `say "hi"`},
		{in: "a.b.c", err: "want schema.table"},
		{in: `"open`, err: "unterminated"},
		{in: "a..b", err: "empty name"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseTableName(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, want an error containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Schema != tc.schema || got.Name != tc.name {
				t.Errorf("got %q.%q, want %q.%q", got.Schema, got.Name, tc.schema, tc.name)
			}
		})
	}
}

func TestParse(t *testing.T) {
	s, err := Parse([]byte(`{"host": "h", "user": "u", "database": "d", "tables": ["t"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if s.Port != 5432 || s.Slot != DefaultSlot || !*s.Snapshot || s.BatchSize != DefaultBatchSize || s.Truncate != TruncatePropagate ||
		s.UnchangedToast != ToastFetch || s.Policy != values.Fail || s.TargetSchema != "public" || s.HeartbeatEvery != DefaultHeartbeat || s.TableNames[0].String() != "public.t" ||
		s.SnapshotWaitTimeout != DefaultSnapshotWait {
		t.Errorf("defaults not filled: %+v", s)
	}
	for _, tc := range []struct{ in, err string }{
		{`{"user": "u", "database": "d"}`, "host is required"},
		{`{"host": "h", "user": "u", "database": "d", "slot": "Bad-Name"}`, `slot "Bad-Name"`},
		{`{"host": "h", "user": "u", "database": "d", "heartbeat": "soon"}`, `heartbeat "soon"`},
		{`{"host": "h", "user": "u", "database": "d", "snapshot_wait_timeout": "-1m"}`, `snapshot_wait_timeout "-1m" is not a positive duration`},
		{`{"host": "h", "user": "u", "database": "d", "tables": ["t", "public.t"]}`, "listed twice"},
		{`{"host": "h", "user": "u", "database": "d", "sslmode": "maybe"}`, `sslmode "maybe"`},
		{`{"host": "h", "user": "u", "database": "d", "tabels": ["t"]}`, "unknown field"},
		{`{"host": "h", "user": "u", "database": "d", "tables": ["t"], "table_options": {"public.u": {"key_columns": ["a"]}}}`, "table_options names public.u, which is not in tables"},
		{`{"host": "h", "user": "u", "database": "d", "tables": ["t"], "table_options": {"t": {"key_columns": ["a", "a"]}}}`, "key_columns lists a twice"},
		{`{"host": "h", "user": "u", "database": "d", "tables": ["t"], "table_options": {"t": {"mode": "upsert"}}}`, `table_options.t.mode is "upsert"; the modes are append`},
		{`{"host": "h", "user": "u", "database": "d", "tables": ["t"], "table_options": {"t": {"mode": "full_row", "key_columns": ["a"]}}}`, `sets both mode: full_row and key_columns`},
		{`{"host": "h", "user": "u", "database": "d", "tables": ["t"], "table_options": {"t": {"mode": "append", "key_columns": ["a"]}}}`, "sets both mode: append and key_columns"},
		{`{"host": "h", "user": "u", "database": "d", "tables": ["t"], "table_options": {"t": {"keys": ["a"]}}}`, "unknown field"},
		{`{"host": "h", "user": "u", "database": "d", "tables": ["t"], "table_options": {"t": {"hash_columns": {"email": {"salt": ""}}}}}`, "table_options.public.t.hash_columns.email.salt is empty"},
		{`{"host": "h", "user": "u", "database": "d", "tables": ["t"], "table_options": {"t": {"exclude_columns": ["e"], "hash_columns": {"e": {"salt": "s3cret"}}}}}`, "table_options.public.t: column e is both excluded and hashed"},
	} {
		if _, err := Parse([]byte(tc.in)); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: got %v, want an error containing %q", tc.in, err, tc.err)
		}
	}
}

func TestParseSnapshotWaitTimeout(t *testing.T) {
	s, err := Parse([]byte(`{"host": "h", "user": "u", "database": "d", "snapshot_wait_timeout": "90s"}`))
	if err != nil || s.SnapshotWaitTimeout != 90*time.Second {
		t.Fatalf("snapshot_wait_timeout 90s: %v, %v", s.SnapshotWaitTimeout, err)
	}
}

// Protected columns are compiled by stream name; the salt is kept, never shown in an error.
func TestParseProtectedColumns(t *testing.T) {
	s, err := Parse([]byte(`{"host": "h", "user": "u", "database": "d", "tables": ["t", "u"], "table_options": {"t": {"exclude_columns": ["ssn"], "hash_columns": {"email": {"salt": "s3cret"}}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if !s.Protect.Hides("public.t", "ssn") || !s.Protect.Hides("public.t", "email") || s.Protect.Hides("public.t", "id") || s.Protect.Protects("public.u") {
		t.Errorf("rules not compiled by stream name: %+v", s.Protect)
	}
	if _, err := Parse([]byte(`{"host": "h", "user": "u", "database": "d", "tables": ["t"], "table_options": {"t": {"exclude_columns": ["e"], "hash_columns": {"e": {"salt": "s3cret"}}}}}`)); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("error %v: want one without the salt", err)
	}
	if s, err := Parse([]byte(`{"host": "h", "user": "u", "database": "d", "tables": ["t"]}`)); err != nil || s.Protect != nil {
		t.Errorf("no rules: %v, %v", s.Protect, err)
	}
}

func TestParseTableOptions(t *testing.T) {
	s, err := Parse([]byte(`{"host": "h", "user": "u", "database": "d", "tables": ["t", "app.Log"], "table_options": {"public.t": {"key_columns": ["a", "b"]}, "app.log": {}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Options[TableName{"public", "t"}].KeyColumns; strings.Join(got, ",") != "a,b" {
		t.Errorf("public.t key_columns %v", got)
	}
	if _, ok := s.Options[TableName{"app", "log"}]; !ok {
		t.Errorf("app.log options missing: %+v", s.Options)
	}
}

// TestParseRoles: table_options of a destination are per stream (soft_delete, metadata_columns, history, not
// required to be in tables) and become rowmeta's overrides; each role refuses the other role's keys with a
// config fault naming the key, and the source keeps its own rules.
func TestParseRoles(t *testing.T) {
	const conn = `"host": "h", "user": "u", "database": "d"`
	s, err := ParseDestination([]byte(`{` + conn + `, "soft_delete": true, "table_options": {"shop.orders": {"soft_delete": false, "history": true, "metadata_columns": ["op"]}, "a.b": {}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if o, err := s.Settings.For("shop.orders"); err != nil || o != (rowmeta.Options{Op: true, History: true}) {
		t.Errorf("shop.orders: %+v, %v; want op and history, no soft delete", o, err)
	}
	if o, err := s.Settings.For("shop.other"); err != nil || o != (rowmeta.Options{SoftDelete: true}) {
		t.Errorf("shop.other: %+v, %v; want the connection's soft delete", o, err)
	}
	for _, tc := range []struct {
		role     Role
		in, want string
	}{
		{RoleDestination, `"table_options": {"public.t": {"where": "a > 1"}}`, "table_options.public.t.where is a source setting"},
		{RoleDestination, `"table_options": {"public.t": {"key_columns": ["a"], "history": true}}`, "table_options.public.t.key_columns is a source setting"},
		{RoleDestination, `"table_options": {"public.t": {"exclude_columns": ["a"]}}`, "table_options.public.t.exclude_columns is a source setting"},
		{RoleDestination, `"table_options": {"public.t": {"hash_columns": {"a": {"salt": "x"}}}}`, "table_options.public.t.hash_columns is a source setting"},
		{RoleDestination, `"table_options": {"public.t": {"mode": "append"}}`, "table_options.public.t.mode is a source setting"},
		{RoleSource, `"tables": ["t"], "table_options": {"t": {"soft_delete": true}}`, "table_options.t.soft_delete is a destination setting"},
		{RoleSource, `"tables": ["t"], "table_options": {"t": {"where": "a > 1", "metadata_columns": ["op"]}}`, "table_options.t.metadata_columns is a destination setting"},
		{RoleSource, `"tables": ["t"], "table_options": {"t": {"history": false}}`, "table_options.t.history is a destination setting"},
	} {
		_, err := parse([]byte(`{`+conn+`, `+tc.in+`}`), tc.role)
		if err == nil || !errors.Is(err, fault.ErrConfig) || !strings.Contains(err.Error(), tc.want) || fault.FixOf(err) == "" {
			t.Errorf("%s: got %v, want a config fault with a fix containing %q", tc.in, err, tc.want)
		}
	}
	// A bad override is refused at parse, naming the stream.
	if _, err := ParseDestination([]byte(`{` + conn + `, "table_options": {"x.y": {"metadata_columns": ["when"]}}}`)); err == nil || !strings.Contains(err.Error(), `table_options.x.y`) {
		t.Errorf("unknown metadata column in an override: %v", err)
	}
	// Either role (Teardown): a source entry still must name a table of tables; a destination entry need not.
	if _, err := Parse([]byte(`{` + conn + `, "tables": ["t"], "table_options": {"t": {"where": "a > 1"}, "other.stream": {"history": true}}}`)); err != nil {
		t.Errorf("either role: %v", err)
	}
}

// TestTablePatterns: an entry with `*` or `?` in an unquoted part is a pattern, matched per part (schema, table)
// after folding unquoted parts to lower case; quoted parts are literal; exact names keep meaning what they did.
// Expand adds the matching tables after the exact ones, in name order, and refuses at a first start a pattern
// that matches nothing.
func TestTablePatterns(t *testing.T) {
	tn := func(s, n string) TableName { return TableName{Schema: s, Name: n} }
	existing := []TableName{tn("shop", "items"), tn("shop", "orders"), tn("public", "orders_2024"), tn("public", "orders_2025"),
		tn("public", "orders"), tn("Shop", "Big"), tn("public", "a*b"), tn("shopx", "items")}
	for _, tc := range []struct {
		name     string
		tables   string
		opts     string
		first    bool
		want     []string
		parseErr string
		err      string
	}{
		{name: "exact only", tables: `["shop.items", "orders"]`, first: true, want: []string{"shop.items", "public.orders"}},
		{name: "schema star", tables: `["shop.*"]`, first: true, want: []string{"shop.items", "shop.orders"}},
		{name: "prefix", tables: `["public.orders_*"]`, first: true, want: []string{"public.orders_2024", "public.orders_2025"}},
		{name: "default schema", tables: `["orders_202?"]`, first: true, want: []string{"public.orders_2024", "public.orders_2025"}},
		{name: "unquoted folds case", tables: `["SHOP.*"]`, first: true, want: []string{"shop.items", "shop.orders"}},
		{name: "quoted keeps case", tables: `["\"Shop\".*"]`, first: true, want: []string{"Shop.Big"}},
		{name: "quoted star is a character", tables: `["\"a*b\""]`, first: true, want: []string{"public.a*b"}},
		{name: "star does not span the dot", tables: `["shop*"]`, first: false, want: nil},
		{name: "any schema", tables: `["*.items"]`, first: true, want: []string{"shop.items", "shopx.items"}},
		{name: "exact first, then matched", tables: `["shop.orders", "shop.*"]`, first: true, want: []string{"shop.orders", "shop.items"}},
		{name: "no match at first start", tables: `["shop.*", "sales.*"]`, first: true, err: "pattern sales.* matches no table"},
		{name: "no match later", tables: `["shop.*", "sales.*"]`, first: false, want: []string{"shop.items", "shop.orders"}},
		{name: "options for a matched name", tables: `["shop.*"]`, opts: `{"shop.new": {"key_columns": ["id"]}}`, first: true, want: []string{"shop.items", "shop.orders"}},
		{name: "options for an unmatched name", tables: `["shop.*"]`, opts: `{"sales.x": {"key_columns": ["id"]}}`, parseErr: "table_options names sales.x, which is not in tables"},
		{name: "bad quoting", tables: `["\"shop.*"]`, parseErr: "unterminated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw := `{"host": "h", "user": "u", "database": "d", "tables": ` + tc.tables
			if tc.opts != "" {
				raw += `, "table_options": ` + tc.opts
			}
			s, err := Parse([]byte(raw + `}`))
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
			var got []string
			for _, n := range s.TableNames {
				got = append(got, n.String())
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("tables %q, want %q", got, tc.want)
			}
		})
	}
}
