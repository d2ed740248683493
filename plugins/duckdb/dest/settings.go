package dest

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
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
	// MemoryLimit is DuckDB's memory_limit for the database (default DefaultMemoryLimit): what DuckDB's
	// buffer manager holds beyond it goes to DuckDB's temporary directory (the file's path + ".tmp"). It also
	// sizes the parts a coalesced range is committed in (PartBytes).
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
var memoryLimitRE = regexp.MustCompile(`^\s*(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)\s*$`)

// DefaultMemoryLimit is memory_limit when the settings leave it out: issue #31's bound for a destination.
// With parts committed as PartBytes says, a range of any size applies under it (TestBigRangeUnderMemoryLimit);
// before, a 1 GiB range held its whole open transaction in DuckDB's memory and failed under 256MiB.
const DefaultMemoryLimit = "256MiB"

// sizeUnits are the bytes of memory_limit's units.
var sizeUnits = map[string]float64{"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
	"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}

// limitBytes is MemoryLimit in bytes (ParseSettings checked it is a size).
func (s Settings) limitBytes() int64 {
	m := memoryLimitRE.FindStringSubmatch(s.MemoryLimit)
	if m == nil {
		return 0
	}
	n, _ := strconv.ParseFloat(m[1], 64)
	return int64(n * sizeUnits[m[2]])
}

// PartBytes is how many bytes of Arrow batches (as the engine sends them) an apply writes into one DuckDB
// transaction before it commits them with their fence and goes on in a new one: a quarter of memory_limit.
// The open transaction's undo and version data (DuckDB's TRANSACTION memory) grows with what it wrote; a
// quarter leaves the rest of the limit to the table's blocks and the primary key's index, which DuckDB pages
// under the limit once committed. Measured (dest's TestBigRangeUnderMemoryLimit, 64MiB): a 1M-row range failed
// with "Out of Memory Error" in one transaction and applied in parts of 16 MiB.
func (s Settings) PartBytes() int64 { return max(s.limitBytes()/4, 1<<20) }

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
    "memory_limit": {"type": "string", "default": "256MiB", "description": "DuckDB's memory_limit for the database (e.g. 1GiB; default 256MiB): DuckDB spills beyond it to the file's .tmp directory, and a coalesced range is committed in parts of a quarter of it; the plugin process's RSS is the limit plus its idle RSS (about 70 MiB) plus what DuckDB allocates outside the limit, which grows with the table (README, Memory)"},
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
	if s.MemoryLimit == "" {
		s.MemoryLimit = DefaultMemoryLimit
	}
	if !memoryLimitRE.MatchString(s.MemoryLimit) {
		return s, fmt.Errorf("settings: memory_limit %q is not a size: want a number with B, KB, MB, GB, KiB, MiB or GiB, such as \"256MiB\"", s.MemoryLimit)
	}
	if err := s.Settings.Check(); err != nil {
		return s, err
	}
	return s, nil
}
