package config

import (
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/go-version"
)

// Defaults applied by Load when a key is absent. doc.go explains each one.
const (
	DefaultDelivery            = ExactlyOnce
	DefaultGroupCommitMaxBytes = 8 << 20 // 8MiB
	DefaultGroupCommitMaxDelay = 200 * time.Millisecond
	DefaultMaxUnappliedBytes   = 1 << 30 // 1GiB
	// A coalesced apply of at most 256MiB: large enough that a lake destination catching up writes big files
	// and few snapshots (32 default 8MiB entries per commit), small enough that one apply's transaction stays
	// far below the default 1GiB the WAL may hold unapplied, so a destination never waits on its own range.
	DefaultApplyMaxBytes = 256 << 20
)

// RedactedValue replaces every settings value that came from ${…} when settings are
// rendered for logs.
const RedactedValue = "<redacted>"

// Config is one loaded skippr.yml. Slices keep file order.
type Config struct {
	// Path is the file as it was named to Load; every error and Pos uses it.
	Path string
	// Dir is the absolute directory of Path; relative paths in the file resolve against it.
	Dir string

	Registries  []*Registry
	Connections []*Connection
	Pipelines   []*Pipeline
	Metrics     MetricsConfig
	Query       QueryConfig

	pos     map[string]Pos
	secrets map[string]string
}

// Secrets returns the environment variables the file interpolated, name → value: every one is secret (see
// doc.go), and whatever skippr prints must show ${NAME} instead of the value.
func (c *Config) Secrets() map[string]string { return c.secrets }

// MetricsConfig is the top-level `metrics:` key: where `skippr sync` serves /metrics, /healthz and /readyz.
type MetricsConfig struct {
	// Addr is host:port as written; "" serves nothing.
	Addr string
	Pos  Pos
}

// QueryConfig is the top-level `query:` key: which connection's plugin answers `skippr query`, or which
// running `skippr serve` does.
type QueryConfig struct {
	// Connection names the connection whose plugin is the query engine (it must offer the query.engine
	// service); "" lets `skippr query` take the first connection of plugin duckdb, or duckdb itself.
	Connection string
	// Server is the address of a running `skippr serve` that answers `skippr query` instead of plugins it
	// would start (host:port, grpc://host:port or grpc+tls://host:port); "" starts the plugins.
	Server string
	// ServerToken is the bearer token sent to Server (usually "${ENV_VAR}"; a secret, redacted in logs).
	ServerToken string
	Pos         Pos
}

// Connection returns the connection with the given name.
func (c *Config) Connection(name string) (*Connection, bool) {
	for _, conn := range c.Connections {
		if conn.Name == name {
			return conn, true
		}
	}
	return nil, false
}

// Pipeline returns the pipeline with the given name.
func (c *Config) Pipeline(name string) (*Pipeline, bool) {
	for _, p := range c.Pipelines {
		if p.Name == name {
			return p, true
		}
	}
	return nil, false
}

// ConnectionNames lists the connection names in file order.
func (c *Config) ConnectionNames() []string {
	names := make([]string, len(c.Connections))
	for i, conn := range c.Connections {
		names[i] = conn.Name
	}
	return names
}

// Pos returns where a key came from. keyPath uses the same spelling as errors:
// "pipelines.orders.wal.group_commit.max_bytes", "pipelines.orders.destinations[1]",
// "connections.gen.settings.tables[0].name"; keys that are not plain words are quoted:
// `connections.gen.settings["a.b"]`. Only keys present in the file have a position.
func (c *Config) Pos(keyPath string) (Pos, bool) {
	p, ok := c.pos[keyPath]
	return p, ok
}

// Registry is a plugin registry the config trusts, with the public keys that sign it.
type Registry struct {
	// URL is normalized: file:///absolute/dir for local registries (relative paths were resolved
	// against the config directory), otherwise the http(s) URL as written.
	URL string
	// Keys are inline public keys, as written.
	Keys []string
	// KeyFiles are absolute paths of public key files. They are not read here.
	KeyFiles []string
	Pos      Pos
}

// Connection is a named, configured plugin instance.
type Connection struct {
	Name   string
	Plugin string
	// Version is the constraint as written ("~> 0.1"); "" accepts any version.
	Version string
	// Constraints is Version parsed; nil when Version is "".
	Constraints version.Constraints
	// Path is an absolute path to a local plugin binary that overrides the registry
	// (unverified); "" when not set.
	Path     string
	Settings Settings
	// Apply limits each apply when the connection is a pipeline's destination and coalesces (see doc.go).
	Apply ApplyLimits
	Pos   Pos
}

// ApplyLimits bound one apply of a destination that takes a range of WAL entries at once (the plugin offers
// coalesce). A destination that is behind gets everything committed up to these limits in one commit.
type ApplyLimits struct {
	// MaxInterval: a destination that has caught up waits until this long after its last apply began before
	// it applies again (unless MaxBytes or MaxEntries fill first), so it commits fewer, larger ranges. 0
	// applies as soon as an entry is committed.
	MaxInterval time.Duration
	MaxBytes    int64 // WAL bytes in one apply; the first entry goes even when it alone is larger
	MaxEntries  int   // WAL entries in one apply; 0 is no limit
	// Unset: the limits `apply:` leaves out. Each takes the destination plugin's proposal when it makes one
	// (a warehouse proposes max_interval 60s), else the default above; a limit written out always wins, so
	// `max_interval: 0s` means no wait whatever the plugin proposes.
	Unset ApplyKeys
	Pos   Pos // where `apply:` is, or the connection when it is absent
}

// ApplyKeys names apply limits, one flag per key of `apply:`.
type ApplyKeys struct {
	MaxInterval, MaxBytes, MaxEntries bool
}

// SettingsJSON returns the interpolated settings as a JSON object, keys in file order,
// ready to hand to the plugin. It contains secrets: never log it.
func (c *Connection) SettingsJSON() ([]byte, error) {
	b, err := c.Settings.JSON()
	if err != nil {
		return nil, fmt.Errorf("connection %s: settings: %w", c.Name, err)
	}
	return b, nil
}

// Delivery is a pipeline's delivery guarantee.
type Delivery string

const (
	ExactlyOnce Delivery = "exactly-once"
	AtLeastOnce Delivery = "at-least-once"
)

// Pipeline moves changes from one source connection to one or more destinations through a WAL.
type Pipeline struct {
	Name         string
	Source       string   // a connection name; Load checked it exists
	Destinations []string // connection names, at least one, no duplicates
	Streams      []string // empty means every stream the source discovers
	Delivery     Delivery
	WAL          WALConfig
	Apply        ApplyConfig
	Fleet        FleetConfig
	Pos          Pos
}

// FleetConfig places a pipeline in fleet mode (`skippr worker`).
type FleetConfig struct {
	// Pin names the one worker allowed to run the pipeline ("" = any worker); a local-disk WAL needs it,
	// because no other worker could read that WAL.
	Pin string
}

// WALConfig says where and how a pipeline's write-ahead log is written.
type WALConfig struct {
	// URL is normalized: file:///absolute/dir or s3://bucket/prefix.
	URL string
	// Scheme is "file" or "s3".
	Scheme string
	// Dir is the absolute WAL directory when Scheme is "file".
	Dir string
	// Bucket and Prefix locate the WAL when Scheme is "s3". Prefix has no leading or
	// trailing slash and may be empty.
	Bucket, Prefix string
	S3             S3Config
	GroupCommit    GroupCommit
	// MaxUnappliedBytes bounds committed-but-not-applied WAL bytes; the source is
	// back-pressured beyond it.
	MaxUnappliedBytes int64
	// Compression is the codec new WAL segments are written with: s2 (default), zstd or none.
	Compression string
	Pos         Pos
}

// S3Config tunes the S3 client for an s3:// WAL. Zero values defer to the AWS SDK's
// usual configuration chain (environment, shared config, instance metadata).
type S3Config struct {
	Endpoint  string // e.g. http://127.0.0.1:9000 for MinIO; "" = AWS
	Region    string
	PathStyle bool
}

// GroupCommit batches WAL appends into one durable write.
type GroupCommit struct {
	MaxBytes int64
	MaxDelay time.Duration
}

// ApplyConfig controls the loop that hands committed WAL batches to destinations.
type ApplyConfig struct {
	// Paused stops applying; the source keeps writing to the WAL up to MaxUnappliedBytes.
	Paused bool
}

// Pos is where a key (or list item) sits in a config file.
type Pos struct {
	File   string
	Line   int // 1-based; 0 when unknown
	Column int // 1-based
}

func (p Pos) String() string {
	switch {
	case p.Line == 0:
		return p.File
	case p.Column == 0:
		return fmt.Sprintf("%s:%d", p.File, p.Line)
	}
	return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Column)
}

// Error is one problem in a config file. Load and ValidateSettings return several of
// them joined with errors.Join; use errors.As to get the first.
type Error struct {
	Pos Pos
	Key string // key path, e.g. pipelines.orders.delivery; "" for the whole document
	Msg string
}

func (e *Error) Error() string {
	var b strings.Builder
	if pos := e.Pos.String(); pos != "" {
		b.WriteString(pos + ": ")
	}
	if e.Key != "" {
		b.WriteString(e.Key + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}
