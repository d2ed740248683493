package dest

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/skippr-dev/skippr/plugin-sdk/rowmeta"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

// Settings of the destination, as the pipeline config gives them.
type Settings struct {
	// Path is the .duckdb file; it is created (with its directory) on first use.
	Path string `json:"path"`
	// Schema holds the tables and the state table (default "main"); it is created when missing.
	Schema string `json:"schema"`
	// MemoryLimit is DuckDB's memory_limit for the database ("": DuckDB's default, 80% of RAM): what an open
	// apply transaction holds beyond it goes to DuckDB's temporary directory (the file's path + ".tmp"). There
	// is no smaller default: the primary keys' ART indexes must fit under it (DuckDB's documentation), and a
	// 1 GiB backlog applied as one range ran out of memory under 256MiB (BENCHMARKS.md, "A backlog applied as
	// one range").
	MemoryLimit string `json:"memory_limit"`
	// Settings are soft_delete, metadata_columns, history and their per-stream table_options
	// (plugin-sdk/rowmeta; history.go): every decision is the stream's, through Meta.
	rowmeta.Settings
}

// Meta is what soft_delete, metadata_columns and history are for stream: the connection's settings with the
// stream's table_options over them. ParseSettings checked every override (rowmeta.Settings.Check), so the
// error For could return cannot happen for settings it returned.
func (s Settings) Meta(stream string) rowmeta.Options {
	o, _ := s.Settings.For(stream)
	return o
}

// memoryLimitRE is a size as DuckDB's memory_limit takes it.
var memoryLimitRE = regexp.MustCompile(`^\s*\d+(\.\d+)?\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)\s*$`)

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
    "schema": {"type": "string", "minLength": 1, "default": "main", "description": "schema of the tables and of the _skippr_state table (created when missing)"},
    "memory_limit": {"type": "string", "description": "DuckDB's memory_limit for the database (e.g. 2GiB; default DuckDB's, 80% of RAM); an apply's transaction spills beyond it to the file's .tmp directory, but the primary keys' indexes must fit"},
    ` + rowmeta.SchemaProperties + `
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
	if s.MemoryLimit != "" && !memoryLimitRE.MatchString(s.MemoryLimit) {
		return s, fmt.Errorf("settings: memory_limit %q is not a size: want a number with B, KB, MB, GB, KiB, MiB or GiB, such as \"256MiB\"", s.MemoryLimit)
	}
	if err := s.Settings.Check(); err != nil {
		return s, err
	}
	return s, nil
}
