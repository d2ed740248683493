package dest

import (
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/rowmeta"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

// Settings of the destination, as the pipeline config gives them.
type Settings struct {
	Project  string `json:"project"`
	Dataset  string `json:"dataset"`
	Location string `json:"location"`
	// CredentialsJSON is a service-account key (the JSON text, usually ${ENV} in the config); CredentialsFile
	// a path to one. With neither, application-default credentials (GOOGLE_APPLICATION_CREDENTIALS, gcloud's
	// login, or the metadata server) are used.
	CredentialsJSON string `json:"credentials_json"`
	CredentialsFile string `json:"credentials_file"`
	// Endpoint points both the REST and the Storage Write API at one http(s) address instead of Google's
	// services, without authentication: for tests against testkit/bigquerytest.
	Endpoint string `json:"endpoint"`
	// TestCrashDir, with Endpoint only, makes the plugin exit at a named crash point: right before the
	// transaction of the pipeline's first apply, and of every apply whose range holds a multiple of 25, each
	// once (a marker file in the directory records it). Chaos tests use it to land a crash in the one window where
	// staged rows exist and nothing is committed, instead of hoping a SIGKILL hits it.
	TestCrashDir string `json:"test_crash_dir"`
	// Settings are soft_delete, metadata_columns, history and their per-stream table_options
	// (plugin-sdk/rowmeta); each stream's are rowmeta.Settings.For(stream).
	rowmeta.Settings
}

// SettingsSchema is the JSON Schema of Settings; the engine validates configs against it.
const SettingsSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "bigquery destination settings",
  "type": "object",
  "additionalProperties": false,
  "required": ["project", "dataset"],
  "properties": {
    "project": {"type": "string", "minLength": 1, "description": "Google Cloud project id that holds the dataset and runs the query jobs"},
    "dataset": {"type": "string", "minLength": 1, "description": "dataset of the tables and of the pipelines' _skippr_state_<pipeline> tables (created when missing)"},
    "location": {"type": "string", "description": "dataset location when it is created, and of the jobs (default: the dataset's)"},
    "credentials_json": {"type": "string", "description": "a service-account key as JSON text; use ${ENV} rather than the text itself"},
    "credentials_file": {"type": "string", "description": "path of a service-account key file"},
    "endpoint": {"type": "string", "description": "for tests only: http://host:port of a BigQuery stand-in serving REST and the Storage Write API, used without authentication"},
    "test_crash_dir": {"type": "string", "description": "for tests only, with endpoint: exit before the commit of the first apply and of every 25th apply, each once, recording it in this directory"},
    ` + rowmeta.SchemaProperties + `
  }
}`

var (
	projectRE = regexp.MustCompile(`^[a-z][a-z0-9.:-]{4,61}[a-z0-9]$`)
	datasetRE = regexp.MustCompile(`^[A-Za-z0-9_]+$`)
)

// ParseSettings decodes and checks settings.
func ParseSettings(raw json.RawMessage) (Settings, error) {
	var s Settings
	if err := serve.DecodeSettings(raw, &s); err != nil {
		return s, fault.ConfigErr(err, "fix the bigquery connection's settings (see plugins/bigquery/README.md)")
	}
	switch {
	case s.Project == "":
		return s, fault.ConfigErr(fmt.Errorf("settings: project is required"), "set project to the Google Cloud project id")
	case !projectRE.MatchString(s.Project):
		return s, fault.ConfigErr(fmt.Errorf("settings: project %q is not a project id", s.Project), "set project to the project's id (6–30 lower-case letters, digits and dashes), not its name or number")
	case s.Dataset == "":
		return s, fault.ConfigErr(fmt.Errorf("settings: dataset is required"), "set dataset to the BigQuery dataset the tables go to")
	case !datasetRE.MatchString(s.Dataset):
		return s, fault.ConfigErr(fmt.Errorf("settings: dataset %q: a dataset id has only letters, digits and underscores", s.Dataset), "set dataset to a valid dataset id")
	case s.CredentialsJSON != "" && s.CredentialsFile != "":
		return s, fault.ConfigErr(fmt.Errorf("settings: credentials_json and credentials_file are both set"), "keep one of credentials_json and credentials_file")
	case s.Endpoint != "" && (s.CredentialsJSON != "" || s.CredentialsFile != ""):
		return s, fault.ConfigErr(fmt.Errorf("settings: endpoint is for tests against a stand-in, which takes no credentials"), "remove endpoint to write to BigQuery, or the credentials to use a stand-in")
	}
	if s.TestCrashDir != "" && s.Endpoint == "" {
		return s, fault.ConfigErr(fmt.Errorf("settings: test_crash_dir is a test hook and needs endpoint (a stand-in)"), "remove test_crash_dir")
	}
	if err := s.Settings.Check(); err != nil {
		return s, err
	}
	if s.CredentialsJSON != "" {
		var key struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal([]byte(s.CredentialsJSON), &key); err != nil || key.Type == "" {
			// Never quote the value: it is a secret.
			return s, fault.ConfigErr(fmt.Errorf("settings: credentials_json is not a service-account key (JSON with a \"type\")"),
				"set credentials_json to the key file's JSON text, e.g. ${GOOGLE_CREDENTIALS_JSON}")
		}
	}
	if s.Endpoint != "" {
		u, err := url.Parse(s.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
			return s, fault.ConfigErr(fmt.Errorf("settings: endpoint %q is not http(s)://host:port", s.Endpoint), "set endpoint to the stand-in's base address, or remove it to write to BigQuery")
		}
	}
	return s, nil
}

// key identifies the settings a client was made for.
func (s Settings) key() string {
	b, _ := json.Marshal(s)
	return string(b)
}
