package dest

import (
	"errors"
	"strings"
	"testing"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
)

func TestParseSettings(t *testing.T) {
	for _, c := range []struct {
		name, raw, want string
	}{
		{"minimal", `{"project": "my-project", "dataset": "analytics"}`, ""},
		{"no project", `{"dataset": "analytics"}`, "project is required"},
		{"project name not id", `{"project": "My Project", "dataset": "analytics"}`, "is not a project id"},
		{"bad dataset", `{"project": "my-project", "dataset": "an-alytics"}`, "only letters, digits and underscores"},
		{"unknown key", `{"project": "my-project", "dataset": "d", "datset": "x"}`, "unknown field"},
		{"both credentials", `{"project": "my-project", "dataset": "d", "credentials_json": "{\"type\": \"service_account\"}", "credentials_file": "/k.json"}`, "both set"},
		{"endpoint with credentials", `{"project": "my-project", "dataset": "d", "endpoint": "http://127.0.0.1:1", "credentials_file": "/k.json"}`, "takes no credentials"},
		{"endpoint with a path", `{"project": "my-project", "dataset": "d", "endpoint": "http://127.0.0.1:1/x"}`, "is not http(s)://host:port"},
		{"soft delete and metadata", `{"project": "my-project", "dataset": "d", "soft_delete": true, "history": true, "metadata_columns": ["op", "synced_at"], "table_options": {"public.orders": {"history": false, "metadata_columns": []}}}`, ""},
		{"unknown metadata column", `{"project": "my-project", "dataset": "d", "metadata_columns": ["lsn"]}`, `unknown column "lsn"`},
		{"bad override", `{"project": "my-project", "dataset": "d", "table_options": {"public.orders": {"metadata_columns": ["op", "op"]}}}`, "table_options.public.orders"},
		{"credentials not a key", `{"project": "my-project", "dataset": "d", "credentials_json": "s3cr3t-not-json"}`, "is not a service-account key"},
	} {
		_, err := ParseSettings([]byte(c.raw))
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, fault.ErrConfig) || fault.FixOf(err) == ""):
			t.Errorf("%s: want a config error with a fix containing %q, got %v", c.name, c.want, err)
		case err != nil && strings.Contains(err.Error(), "s3cr3t"):
			t.Errorf("%s: the error quotes the secret: %v", c.name, err)
		}
	}
}
