package ingest

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
)

// TestProtectSettings: exclude_columns and hash_columns compile per stream; a key field, a field both excluded
// and hashed, and an empty salt are config faults naming stream and field, and never the salt.
func TestProtectSettings(t *testing.T) {
	for _, tc := range []struct {
		name, stream, errHas string
	}{
		{name: "ok", stream: `{"primary_key": "/id", "exclude_columns": ["ssn"], "hash_columns": {"email": {"salt": "s3cret-salt"}}}`},
		{name: "key excluded", stream: `{"primary_key": "/id", "exclude_columns": ["id"]}`, errHas: "table people: key column id cannot be excluded"},
		{name: "key hashed", stream: `{"primary_key": ["/a", "/id"], "hash_columns": {"id": {"salt": "s3cret-salt"}}}`, errHas: "table people: key column id cannot be hashed"},
		{name: "both", stream: `{"exclude_columns": ["email"], "hash_columns": {"email": {"salt": "s3cret-salt"}}}`, errHas: "streams.people: column email is both excluded and hashed"},
		{name: "empty salt", stream: `{"hash_columns": {"email": {"salt": ""}}}`, errHas: "streams.people.hash_columns.email.salt is empty"},
		{name: "skippr's own", stream: `{"exclude_columns": ["_skippr_op"]}`, errHas: "skippr's own column"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := parseSettings([]byte(`{"streams": {"people": ` + tc.stream + `}}`))
			if tc.errHas == "" {
				if err != nil {
					t.Fatal(err)
				}
				if !cfg.protect.Hides("people", "ssn") || !cfg.protect.Hides("people", "email") || cfg.protect.Hides("people", "id") {
					t.Fatalf("rules not compiled for stream people")
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.errHas) {
				t.Fatalf("got %v, want an error containing %q", err, tc.errHas)
			}
			if !errors.Is(err, fault.ErrConfig) || fault.FixOf(err) == "" {
				t.Errorf("not a config error with a fix: %v", err)
			}
			if strings.Contains(err.Error(), "s3cret-salt") {
				t.Errorf("the error shows the salt: %v", err)
			}
		})
	}
}

// TestHideValue: a refusal about a hashed field (nested too) does not quote the value; one about another field
// is left as it is.
func TestHideValue(t *testing.T) {
	cfg, err := parseSettings([]byte(`{"streams": {"people": {"hash_columns": {"pin": {"salt": "x"}, "a/b": {"salt": "x"}}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		field string
		hide  bool
	}{{"/pin", true}, {"/pin/0", true}, {"/a~1b", true}, {"/name", false}, {"", false}} {
		e := &requestError{Status: http.StatusUnprocessableEntity, Record: intp(3), Field: tc.field, Msg: "record 3, field " + tc.field + ": the value is the number 777"}
		hideValue(cfg, "people", e)
		if got := strings.Contains(e.Msg, "777"); got == tc.hide {
			t.Errorf("field %q: message %q (hidden: want %v)", tc.field, e.Msg, tc.hide)
		}
	}
}
