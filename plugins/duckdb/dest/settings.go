package dest

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

// Settings of the destination, as the pipeline config gives them.
type Settings struct {
	// Path is the .duckdb file; it is created (with its directory) on first use.
	Path string `json:"path"`
	// Schema holds the tables and the state table (default "main"); it is created when missing.
	Schema string `json:"schema"`
}

// DefaultSchema is DuckDB's own default schema.
const DefaultSchema = "main"

// SettingsSchema is the JSON Schema of Settings; the engine validates configs against it, so a misspelt key
// is named before any plugin starts.
const SettingsSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "duckdb destination settings",
  "type": "object",
  "additionalProperties": false,
  "required": ["path"],
  "properties": {
    "path": {"type": "string", "minLength": 1, "description": "the .duckdb file (created on first use, with its directory)"},
    "schema": {"type": "string", "minLength": 1, "default": "main", "description": "schema of the tables and of the _skippr_state table (created when missing)"}
  }
}`

// ParseSettings decodes and checks settings, filling in defaults. Path becomes absolute, so one file has one
// name whatever the plugin's working directory.
func ParseSettings(raw json.RawMessage) (Settings, error) {
	var s Settings
	if err := serve.DecodeSettings(raw, &s); err != nil {
		return s, err
	}
	if s.Path == "" {
		return s, errors.New("settings: path (the .duckdb file) is required")
	}
	if s.Path == ":memory:" || strings.HasPrefix(s.Path, ":memory:") {
		return s, errors.New("settings: path must be a file: an in-memory database would lose every applied row when the plugin stops")
	}
	// The driver reads its DSN as a URL: a '?' or '#' in the path would be taken for options.
	if strings.ContainsAny(s.Path, "?#") {
		return s, fmt.Errorf("settings: path %q: '?' and '#' are not supported in the file name", s.Path)
	}
	abs, err := filepath.Abs(s.Path)
	if err != nil {
		return s, fmt.Errorf("settings: path %q: %w", s.Path, err)
	}
	s.Path = abs
	if s.Schema == "" {
		s.Schema = DefaultSchema
	}
	return s, nil
}
