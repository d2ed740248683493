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
	// MemoryLimit is the plugin's memory for the database (default DefaultMemoryLimit), shared out by
	// DuckDBLimit and GoLimit. It also sizes the parts a coalesced range is committed in (PartBytes).
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

// memory_limit is the whole plugin's, not only DuckDB's: DuckDB's own memory_limit bounds its buffer manager
// (table blocks, staging tables, an open transaction's undo data), not what it allocates beside it, nor the
// Go side (one WAL entry's batches, the fold, gRPC's buffers), nor the garbage Go's collector has not freed.
// Measured on a 5M-row range (BENCHMARKS.md, "duckdb: memory_limit shared out"): beside a buffer manager at
// its limit DuckDB held ≈ 45–60 MiB more, and the Go heap ≈ 50–100 MiB under the collector's default pacing.
// So memory_limit is shared out: three eighths to DuckDB's buffer manager, a quarter to Go (its soft limit),
// and the rest is room for DuckDB's allocations outside its buffer manager.

// DuckDBLimit is DuckDB's memory_limit, in bytes: three eighths of memory_limit. What its buffer manager holds
// beyond it goes to DuckDB's temporary directory (the file's path + ".tmp").
func (s Settings) DuckDBLimit() int64 { return max(s.limitBytes()/8*3, 1<<20) }

// GoLimit is the Go runtime's soft memory limit (main sets it unless GOMEMLIMIT is set): a quarter of
// memory_limit.
func (s Settings) GoLimit() int64 { return max(s.limitBytes()/4, 1<<20) }

// PartBytes is how many bytes of Arrow batches (as the engine sends them), plus the per-statement memory of
// its staging tables (statementCost), an apply writes into one DuckDB transaction before it commits
// them with their fence and goes on in a new one: a quarter of DuckDBLimit.
// The open transaction's undo and version data (DuckDB's TRANSACTION memory) grows with what it wrote; a
// quarter leaves the rest of DuckDB's share to the table's blocks, which DuckDB pages out under its limit once
// committed. Measured (the module's TestBigRangeUnderMemoryLimit, then memory_limit 64MiB for DuckDB): a
// 1M-row range failed with "Out of Memory Error" in one transaction and applied in parts of 16 MiB.
func (s Settings) PartBytes() int64 { return max(s.DuckDBLimit()/4, 1<<20) }

// deleteCost is what DuckDB holds, per row an open transaction deletes, until it commits: the version data of
// the row's vector of 2048 rows, a transaction id per row (16 KiB), in its buffer manager, which it cannot spill.
// Measured with DuckDB alone under memory_limit 64MiB: one DELETE of rows spread over a 6M-row table applied,
// over an 8M-row one it failed (`failed to pin block`), ≈ 8 bytes per row of the table; deleting 1,000 rows a
// transaction, 30 times, applied. Counted per deleted row, the upper bound: rows of one vector share it.
const deleteCost = 16 << 10

// PartDeletes is how many rows a part may delete before it is committed, so that the deletes' version data
// fits a quarter of DuckDBLimit (1,536 by default). A part holds at least one WAL entry, whose deletes need
// up to that entry's deletes × 16 KiB, at most 8 bytes per row of the table.
func (s Settings) PartDeletes() int64 { return max(s.DuckDBLimit()/4/deleteCost, 1) }

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
    "memory_limit": {"type": "string", "default": "256MiB", "description": "the plugin's memory for the database (e.g. 1GiB; default 256MiB), whatever the range: three eighths are DuckDB's memory_limit (it spills beyond it to the file's .tmp directory), a quarter the Go runtime's soft limit, the rest room for DuckDB's allocations outside its limit; a coalesced range is committed in parts of a quarter of DuckDB's share; the process's RSS stays under this plus about 128 MiB; a large table with updates and deletes spread through it needs more, about 21 MiB per million rows (README, Memory)"},
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
