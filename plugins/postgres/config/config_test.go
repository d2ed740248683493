package config

import (
	"strings"
	"testing"
	"time"

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
