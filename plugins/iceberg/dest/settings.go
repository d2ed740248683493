package dest

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/apache/iceberg-go"

	"github.com/skippr-dev/skippr/plugin-sdk/rowmeta"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

// DefaultTargetFileSize is the data file size the writer aims for (Iceberg's own default).
const DefaultTargetFileSize = 128 << 20

// RowGroupRows caps the rows of a Parquet row group in the data files this destination writes, compaction's
// included. iceberg-go's default (write.parquet.row-group-limit, 1,048,576 rows) made every data file of a
// coalesced apply one row group, so a point lookup read through `skippr query`/`skippr serve` (DuckDB prunes
// by row-group statistics, not by page) decoded a whole file's rows to find one. At 131,072 rows the group's
// decode was still most of a lookup on a 10M-row table (DuckDB over the same files rewritten: p50 14.5 ms at
// 131,072, 8.4 ms at 32,768, 9.6 ms at 16,384, where more groups' statistics cost more than the smaller
// decode); a full aggregate took the same time at 131,072 and 32,768, and the files the same space.
const RowGroupRows = 32768

// Settings of the destination, as the pipeline config gives them.
type Settings struct {
	Catalog   CatalogSettings `json:"catalog"`
	Namespace string          `json:"namespace"`
	// Tables maps a stream to its table name; a stream not listed keeps its own name.
	Tables map[string]string `json:"tables"`
	// Partitions gives each table's partition spec, by stream name: "day(created_at)", "bucket(16, id)".
	Partitions map[string][]string `json:"partitions"`
	S3         *S3Settings         `json:"s3"`
	// TargetFileSize is the size in bytes the writer aims for per data file (default 128 MiB).
	TargetFileSize int64 `json:"target_file_size"`
	// FormatVersion of new tables: 2 (default) or 3.
	FormatVersion int `json:"format_version"`
	// UpsertInserts makes inserts and snapshot reads replace any row with the same key (an equality delete per
	// row) instead of plain appends, for sources that may emit a key twice.
	UpsertInserts bool `json:"upsert_inserts"`
	// AutoCompact, when set, compacts a table right after an apply left it with more files than it allows.
	AutoCompact *AutoCompact `json:"auto_compact"`
	// MemoryLimit caps the process's memory (memlimit.go): rows beyond a share of it are written out as
	// uncommitted files during an apply. Default 256 MiB (issue #31's bound); NoMemoryLimit holds every apply whole.
	MemoryLimit ByteSize `json:"memory_limit"`
	// SpillDir is the local directory where the keys that outgrow the memory budget go: a spilled apply's key
	// index (keyruns.go) and a re-snapshot end's key diff (keydiff.go); "" is the system's temp directory.
	SpillDir string `json:"spill_dir"`
	// Settings are soft_delete, metadata_columns, history and their per-stream table_options
	// (plugin-sdk/rowmeta; rowmeta.go, history.go), decided per stream with For.
	rowmeta.Settings
}

// AutoCompact is the background compaction policy: the destination runs `compact` on a table (with its
// defaults: expire snapshots older than 24 h beyond the last 10, orphans older than 72 h) once the table's
// current snapshot holds more data files or more delete files than these. Zero means no limit of that kind.
type AutoCompact struct {
	MaxDataFiles   int `json:"max_data_files"`
	MaxDeleteFiles int `json:"max_delete_files"`
}

// CatalogSettings say where table metadata lives.
type CatalogSettings struct {
	// Type is "sql" (embedded SQLite file, the default) or "rest".
	Type string `json:"type"`
	// Path is the SQLite file of a sql catalog (default: WAREHOUSE/catalog.db for a local warehouse).
	Path string `json:"path"`
	// URI is the REST catalog's base URL.
	URI        string `json:"uri"`
	Token      string `json:"token"`
	Credential string `json:"credential"`
	// Warehouse is where table files go: a local path, file:///path or s3://bucket/prefix. A REST catalog may
	// leave it empty (the server decides) or name a warehouse the server knows.
	Warehouse string `json:"warehouse"`
	// SigV4 signs a REST catalog's requests with AWS Signature V4, as AWS Glue, S3 Tables and SeaweedFS want,
	// instead of sending a bearer token.
	SigV4 *SigV4Settings `json:"sigv4"`
}

// SigV4Settings say how REST catalog requests are signed. Keys left empty are taken from the s3 settings;
// when those have none either, from the AWS default chain (AWS_ACCESS_KEY_ID…, ~/.aws, instance role).
type SigV4Settings struct {
	// Region is the signing region (default: s3.region).
	Region string `json:"region"`
	// Service is the signing name: "execute-api" (the default, as in Iceberg's Java client), "glue",
	// "s3tables"…
	Service         string `json:"service"`
	AccessKeyID     string `json:"access_key_id"`
	SecretAccessKey string `json:"secret_access_key"`
	SessionToken    string `json:"session_token"`
}

// S3Settings configure an S3 (or S3-compatible) warehouse.
type S3Settings struct {
	Endpoint        string `json:"endpoint"`
	Region          string `json:"region"`
	PathStyle       bool   `json:"path_style"`
	AccessKeyID     string `json:"access_key_id"`
	SecretAccessKey string `json:"secret_access_key"`
}

// SettingsSchema is the JSON Schema of Settings.
const SettingsSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "additionalProperties": false,
  "required": ["catalog"],
  "properties": {
    "catalog": {
      "type": "object",
      "additionalProperties": false,
      "properties": {
        "type": {"enum": ["sql", "rest"], "description": "sql: embedded SQLite catalog (default); rest: an Iceberg REST catalog"},
        "path": {"type": "string", "description": "SQLite file of a sql catalog (default WAREHOUSE/catalog.db)"},
        "uri": {"type": "string", "description": "base URL of a REST catalog"},
        "token": {"type": "string", "description": "bearer token for a REST catalog"},
        "credential": {"type": "string", "description": "client_id:client_secret for a REST catalog's OAuth endpoint"},
        "warehouse": {"type": "string", "description": "local path, file:///path or s3://bucket/prefix"},
        "sigv4": {
          "type": "object",
          "additionalProperties": false,
          "description": "sign REST catalog requests with AWS Signature V4 (Glue, S3 Tables, SeaweedFS); keys default to the s3 settings, then to the AWS default chain",
          "properties": {
            "region": {"type": "string", "description": "signing region (default s3.region)"},
            "service": {"type": "string", "description": "signing name (default execute-api)"},
            "access_key_id": {"type": "string"},
            "secret_access_key": {"type": "string"},
            "session_token": {"type": "string"}
          }
        }
      }
    },
    "namespace": {"type": "string", "description": "namespace of the tables (default skippr); dots separate levels"},
    "tables": {"type": "object", "additionalProperties": {"type": "string", "minLength": 1}, "description": "stream name to table name"},
    "partitions": {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "string"}}, "description": "stream name to partition fields: identity(col), year|month|day|hour(col), bucket(N, col), truncate(W, col)"},
    "s3": {
      "type": "object",
      "additionalProperties": false,
      "properties": {
        "endpoint": {"type": "string"},
        "region": {"type": "string"},
        "path_style": {"type": "boolean"},
        "access_key_id": {"type": "string"},
        "secret_access_key": {"type": "string"}
      }
    },
    "target_file_size": {"type": "integer", "minimum": 1048576, "description": "bytes per data file (default 134217728)"},
    "format_version": {"enum": [2, 3], "description": "format version of new tables (default 2)"},
    "upsert_inserts": {"type": "boolean", "description": "inserts and snapshot reads replace rows with the same key"},
    "memory_limit": {"oneOf": [{"type": "integer", "minimum": 33554432}, {"type": "string", "pattern": "^\\s*([0-9]+\\s*([KMGT]i?B|B)?|[oO][fF][fF])\\s*$"}], "description": "memory cap of the plugin process: bytes, or \"512MiB\", \"2GiB\"; \"off\" holds each apply whole (default 256MiB)"},
    "spill_dir": {"type": "string", "description": "local directory where the keys that outgrow memory_limit spill: an apply's key index and a re-snapshot end's key diff (default: the system's temp directory, TMPDIR)"},
    ` + rowmeta.SchemaProperties + `,
    "auto_compact": {
      "type": "object",
      "additionalProperties": false,
      "description": "compact a table after an apply once it holds more files than this",
      "properties": {
        "max_data_files": {"type": "integer", "minimum": 0},
        "max_delete_files": {"type": "integer", "minimum": 0}
      }
    }
  }
}`

// DefaultNamespace holds the tables when the settings name none.
const DefaultNamespace = "skippr"

// ParseSettings decodes and checks settings, filling in defaults.
func ParseSettings(raw json.RawMessage) (Settings, error) {
	var s Settings
	if err := serve.DecodeSettings(raw, &s); err != nil {
		return s, err
	}
	c := &s.Catalog
	if c.Type == "" {
		c.Type = "sql"
	}
	switch c.Type {
	case "sql":
		if c.Warehouse == "" {
			return s, errors.New("settings: catalog.warehouse is required for a sql catalog (a local directory, file:///dir or s3://bucket/prefix)")
		}
		if c.URI != "" || c.Token != "" || c.Credential != "" || c.SigV4 != nil {
			return s, errors.New("settings: catalog.uri, token, credential and sigv4 belong to a rest catalog, not to catalog.type sql")
		}
		wh, err := normalizeWarehouse(c.Warehouse)
		if err != nil {
			return s, err
		}
		c.Warehouse = wh
		if c.Path == "" {
			if !strings.HasPrefix(wh, "file://") {
				return s, fmt.Errorf("settings: catalog.path (the SQLite file) is required when the warehouse %s is not local", wh)
			}
			c.Path = filepath.Join(strings.TrimPrefix(wh, "file://"), "catalog.db")
		}
		if c.Path, err = filepath.Abs(c.Path); err != nil {
			return s, fmt.Errorf("settings: catalog.path: %w", err)
		}
	case "rest":
		if c.URI == "" {
			return s, errors.New("settings: catalog.uri is required for a rest catalog")
		}
		u, err := url.Parse(c.URI)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return s, fmt.Errorf("settings: catalog.uri %q is not an http(s) URL", c.URI)
		}
		if c.Path != "" {
			return s, errors.New("settings: catalog.path belongs to a sql catalog, not to catalog.type rest")
		}
		if c.Warehouse != "" && !strings.Contains(c.Warehouse, "://") && filepath.IsAbs(c.Warehouse) {
			wh, err := normalizeWarehouse(c.Warehouse)
			if err != nil {
				return s, err
			}
			c.Warehouse = wh
		}
		if err := s.fillSigV4(); err != nil {
			return s, err
		}
	default:
		return s, fmt.Errorf("settings: catalog.type %q is not sql or rest", c.Type)
	}
	if s.Namespace == "" {
		s.Namespace = DefaultNamespace
	}
	for _, part := range strings.Split(s.Namespace, ".") {
		if part == "" {
			return s, fmt.Errorf("settings: namespace %q has an empty level", s.Namespace)
		}
	}
	for stream, name := range s.Tables {
		if name == "" || strings.Contains(name, ".") {
			return s, fmt.Errorf("settings: tables.%s: table name %q must be non-empty and contain no dot (the namespace setting holds the levels)", stream, name)
		}
	}
	for stream, fields := range s.Partitions {
		for _, f := range fields {
			if _, err := ParsePartitionField(f); err != nil {
				return s, fmt.Errorf("settings: partitions.%s: %w", stream, err)
			}
		}
	}
	if s.TargetFileSize == 0 {
		s.TargetFileSize = DefaultTargetFileSize
	}
	if s.TargetFileSize < 1<<20 {
		return s, fmt.Errorf("settings: target_file_size %d is below 1 MiB", s.TargetFileSize)
	}
	if s.FormatVersion == 0 {
		s.FormatVersion = 2
	}
	if s.FormatVersion != 2 && s.FormatVersion != 3 {
		return s, fmt.Errorf("settings: format_version %d is not 2 or 3 (row-level deletes need 2 or later)", s.FormatVersion)
	}
	if err := s.checkMemoryLimit(); err != nil {
		return s, err
	}
	if err := s.Settings.Check(); err != nil {
		return s, err
	}
	if s.S3 != nil && !strings.HasPrefix(c.Warehouse, "s3://") && c.Type == "sql" {
		return s, fmt.Errorf("settings: s3 is set but the warehouse %s is not an s3:// location", c.Warehouse)
	}
	return s, nil
}

// fillSigV4 completes and checks the catalog's SigV4 settings: region and keys default to the s3 settings,
// because a catalog that signs with AWS keys is nearly always reached with the keys of its warehouse.
func (s *Settings) fillSigV4() error {
	v := s.Catalog.SigV4
	if v == nil {
		return nil
	}
	if s.Catalog.Token != "" || s.Catalog.Credential != "" {
		// Both would set the Authorization header; the signature would replace the token without a word.
		return errors.New("settings: catalog.sigv4 and catalog.token/credential exclude each other: a SigV4 catalog authenticates by signature")
	}
	if v.Service == "" {
		v.Service = "execute-api"
	}
	if s.S3 != nil {
		if v.Region == "" {
			v.Region = s.S3.Region
		}
		if v.AccessKeyID == "" && v.SecretAccessKey == "" {
			v.AccessKeyID, v.SecretAccessKey = s.S3.AccessKeyID, s.S3.SecretAccessKey
		}
	}
	if v.Region == "" {
		return errors.New("settings: catalog.sigv4.region is required (or s3.region): requests are signed for a region")
	}
	if (v.AccessKeyID == "") != (v.SecretAccessKey == "") {
		return errors.New("settings: catalog.sigv4 needs both access_key_id and secret_access_key, or neither (then the AWS default chain)")
	}
	if v.SessionToken != "" && v.AccessKeyID == "" {
		return errors.New("settings: catalog.sigv4.session_token needs access_key_id and secret_access_key")
	}
	return nil
}

func normalizeWarehouse(w string) (string, error) {
	switch {
	case strings.HasPrefix(w, "file://"):
		p := strings.TrimPrefix(w, "file://")
		if !filepath.IsAbs(p) {
			return "", fmt.Errorf("settings: catalog.warehouse %q: a file:// location needs an absolute path", w)
		}
		return "file://" + filepath.Clean(p), nil
	case strings.HasPrefix(w, "s3://"), strings.HasPrefix(w, "s3a://"):
		return w, nil
	case strings.Contains(w, "://"):
		return "", fmt.Errorf("settings: catalog.warehouse %q: only local paths, file:// and s3:// are supported", w)
	}
	abs, err := filepath.Abs(w)
	if err != nil {
		return "", fmt.Errorf("settings: catalog.warehouse %q: %w", w, err)
	}
	return "file://" + abs, nil
}

// TableName is the table a stream lands in.
func (s Settings) TableName(stream string) string {
	if t, ok := s.Tables[stream]; ok {
		return t
	}
	return stream
}

// NamespaceIdent is the namespace as an identifier.
func (s Settings) NamespaceIdent() []string { return strings.Split(s.Namespace, ".") }

// ioProps are the FileIO properties for the warehouse.
func (s Settings) ioProps() iceberg.Properties {
	p := iceberg.Properties{}
	if s.S3 == nil {
		return p
	}
	if s.S3.Endpoint != "" {
		p["s3.endpoint"] = s.S3.Endpoint
	}
	if s.S3.Region != "" {
		p["s3.region"] = s.S3.Region
	}
	if s.S3.AccessKeyID != "" {
		p["s3.access-key-id"] = s.S3.AccessKeyID
	}
	if s.S3.SecretAccessKey != "" {
		p["s3.secret-access-key"] = s.S3.SecretAccessKey
	}
	p["s3.force-virtual-addressing"] = strconv.FormatBool(!s.S3.PathStyle)
	return p
}

// PartitionField is one parsed partition expression.
type PartitionField struct {
	Source    string
	Transform iceberg.Transform
}

var partitionRE = regexp.MustCompile(`^\s*([a-z]+)\s*\(\s*(?:(\d+)\s*,\s*)?([^\s(),]+)\s*\)\s*$`)

// ParsePartitionField parses "day(created_at)", "bucket(16, id)", "truncate(4, name)", "identity(region)" or a
// bare column name (identity).
func ParsePartitionField(expr string) (PartitionField, error) {
	if !strings.Contains(expr, "(") {
		name := strings.TrimSpace(expr)
		if name == "" {
			return PartitionField{}, errors.New("empty partition field")
		}
		return PartitionField{Source: name, Transform: iceberg.IdentityTransform{}}, nil
	}
	m := partitionRE.FindStringSubmatch(expr)
	if m == nil {
		return PartitionField{}, fmt.Errorf("partition field %q: want transform(column) or transform(N, column)", expr)
	}
	fn, arg, col := m[1], m[2], m[3]
	n := 0
	if arg != "" {
		v, err := strconv.Atoi(arg)
		if err != nil || v <= 0 {
			return PartitionField{}, fmt.Errorf("partition field %q: %s needs a positive number", expr, fn)
		}
		n = v
	}
	needN := fn == "bucket" || fn == "truncate"
	if needN != (arg != "") {
		if needN {
			return PartitionField{}, fmt.Errorf("partition field %q: %s needs a number: %s(N, column)", expr, fn, fn)
		}
		return PartitionField{}, fmt.Errorf("partition field %q: %s takes only a column", expr, fn)
	}
	var tr iceberg.Transform
	switch fn {
	case "identity":
		tr = iceberg.IdentityTransform{}
	case "year", "years":
		tr = iceberg.YearTransform{}
	case "month", "months":
		tr = iceberg.MonthTransform{}
	case "day", "days":
		tr = iceberg.DayTransform{}
	case "hour", "hours":
		tr = iceberg.HourTransform{}
	case "bucket":
		tr = iceberg.BucketTransform{NumBuckets: n}
	case "truncate":
		tr = iceberg.TruncateTransform{Width: n}
	default:
		return PartitionField{}, fmt.Errorf("partition field %q: unknown transform %s (identity, year, month, day, hour, bucket, truncate)", expr, fn)
	}
	return PartitionField{Source: col, Transform: tr}, nil
}
