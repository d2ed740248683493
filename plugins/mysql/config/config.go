// Package config holds the plugin's settings, how they become connections, and how server errors become
// sentences a user can act on.
package config

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"slices"
	"strings"
	"time"

	"vitess.io/vitess/go/mysql"
	"vitess.io/vitess/go/mysql/sqlerror"
	"vitess.io/vitess/go/vt/vttls"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/glob"
	"github.com/skippr-dev/skippr/plugin-sdk/protect"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

// Schema is the JSON Schema of Settings.
//
//go:embed settings.schema.json
var Schema []byte

// Settings of the source.
type Settings struct {
	Host            string   `json:"host"`
	Port            int      `json:"port"`
	User            string   `json:"user"`
	Password        string   `json:"password"`
	Database        string   `json:"database"`
	Tables          []string `json:"tables"`
	ServerID        uint32   `json:"server_id"`
	Snapshot        *bool    `json:"snapshot"`
	SnapshotLocking string   `json:"snapshot_locking"`
	// SnapshotParallel is how many tables the snapshot copies at once, each over its own connection.
	SnapshotParallel int      `json:"snapshot_parallel"`
	BatchSize        int      `json:"batch_size"`
	ZeroDate         ZeroDate `json:"zero_date"`
	Truncate         string   `json:"truncate"`
	TLS              string   `json:"tls"`
	// WatermarkDatabase holds the table skippr_watermarks that a re-snapshot writes its watermarks to (the
	// source's resnapshot.go); default: Database, so the binlog filters and grants that cover the tables cover it.
	WatermarkDatabase string `json:"watermark_database"`
	// TableOptions are per-table settings, by table name as in Tables (the same key as the Postgres source's).
	TableOptions map[string]TableOption `json:"table_options"`

	// Protect is the tables' exclude_columns and hash_columns, by stream name (nil: none).
	Protect *protect.Set `json:"-"`
	// ServerIDDerived: ServerID was not set but derived (defaultServerID); a collision is then fixed by setting
	// it or by renaming the pipeline.
	ServerIDDerived bool `json:"-"`
	// Patterns are the entries of tables with a wildcard (plugin-sdk/glob: `*`, `?`), matched against bare table
	// names; Parse takes them out of Tables, which then holds the exact names. The Read adds the tables they
	// match (Expand), and a table created later that matches (source/patterns.go).
	Patterns []string `json:"-"`
}

// Matches says whether a table name matches one of the patterns (an exact name in Tables is not a pattern).
func (s Settings) Matches(name string) bool {
	return slices.ContainsFunc(s.Patterns, func(p string) bool { return glob.Match(p, name) })
}

// Expand adds to Tables, after the exact names and in name order, the tables of existing (the database's base
// tables) that a pattern matches. A pattern matching none is a config fault naming it when first is set (the
// pipeline's first start): it is most likely misspelt. Later an empty match is fine (its tables were dropped, or
// are yet to be created).
func (s *Settings) Expand(existing []string, first bool) error {
	if len(s.Patterns) == 0 {
		return nil
	}
	names := slices.Clone(existing)
	slices.Sort(names)
	var none []string
	for _, p := range s.Patterns {
		if !slices.ContainsFunc(names, func(n string) bool { return glob.Match(p, n) }) {
			none = append(none, p)
		}
	}
	if first && len(none) > 0 {
		return fault.ConfigErr(fmt.Errorf("settings: tables: pattern %s matches no table of database %s", strings.Join(none, ", "), s.Database),
			"correct the pattern (`*` any characters, `?` one; table names are matched case-sensitively), or create a matching table first")
	}
	for _, n := range names {
		if s.Matches(n) && !slices.Contains(s.Tables, n) {
			s.Tables = append(s.Tables, n)
		}
	}
	return nil
}

// TableOption is one table's settings: ExcludeColumns and HashColumns keep sensitive columns out of everything
// the source emits (plugin-sdk/protect says how).
type TableOption struct {
	ExcludeColumns []string                `json:"exclude_columns"`
	HashColumns    map[string]protect.Hash `json:"hash_columns"`
	// Where is a row filter, an SQL boolean expression over the table's columns: the snapshot's SELECT has it
	// and the plugin evaluates it on every binlog row image (source/rowfilter.go).
	Where string `json:"where"`
	// Mode is "" (the table has a primary key) or ModeFullRow: a keyless table whose updates and deletes are
	// matched by the whole old row (source/fullrow.go).
	Mode string `json:"mode"`
}

// ModeFullRow is table_options.<t>.mode for a keyless table matched by full row.
const ModeFullRow = "full_row"

// FullRow says table name is in mode: full_row.
func (s Settings) FullRow(name string) bool { return s.TableOptions[name].Mode == ModeFullRow }

// Where is table name's row filter, "" for none.
func (s Settings) Where(name string) string { return strings.TrimSpace(s.TableOptions[name].Where) }

// ZeroDate is the zero_date setting. Its value null is also YAML's word for nothing: `zero_date: null`
// unquoted reaches the plugin as JSON null, which means that value here (an absent key stays the default).
type ZeroDate string

// UnmarshalJSON takes JSON null as the value "null".
func (z *ZeroDate) UnmarshalJSON(b []byte) error {
	if string(bytes.TrimSpace(b)) == "null" {
		*z = ZeroDateNull
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("zero_date: want one of error, null: %w", err)
	}
	*z = ZeroDate(s)
	return nil
}

// Setting values and defaults.
const (
	LockingMinimal = "minimal"
	LockingNone    = "none"
	ZeroDateError  = "error"
	ZeroDateNull   = "null"

	// What TRUNCATE (and DROP TABLE, or RENAME TABLE away, of a captured table) does: the same setting and
	// values as the Postgres source's (engine/pipeline.SourceTruncates reads it).
	TruncatePropagate = "propagate"
	TruncateError     = "error"
	TruncateIgnore    = "ignore"
	DefaultBatchSize  = 10000
	DefaultParallel   = 4
	MaxParallel       = 16
	DefaultPort       = 3306

	TLSPreferred      = "preferred"
	TLSDisabled       = "disabled"
	TLSRequired       = "required"
	TLSVerifyIdentity = "verify_identity"
)

// Parse decodes and validates settings, filling defaults, for a caller that does not know the pipeline.
func Parse(raw json.RawMessage) (Settings, error) { return ParseFor(raw, "") }

// ParseFor is Parse for the named pipeline ("" when the engine did not say): an unset server_id is derived from
// the pipeline's name too.
func ParseFor(raw json.RawMessage, pipeline string) (Settings, error) {
	var s Settings
	if err := serve.DecodeSettings(raw, &s); err != nil {
		return s, fault.ConfigErr(err, "fix the settings as the message says")
	}
	var problems []string
	if s.Port == 0 {
		s.Port = DefaultPort
	}
	if s.Snapshot == nil {
		t := true
		s.Snapshot = &t
	}
	if s.SnapshotLocking == "" {
		s.SnapshotLocking = LockingMinimal
	}
	if s.BatchSize == 0 {
		s.BatchSize = DefaultBatchSize
	}
	if s.SnapshotParallel == 0 {
		s.SnapshotParallel = DefaultParallel
	}
	if s.ZeroDate == "" {
		s.ZeroDate = ZeroDateError
	}
	if s.Truncate == "" {
		s.Truncate = TruncatePropagate
	}
	if s.Truncate != TruncatePropagate && s.Truncate != TruncateError && s.Truncate != TruncateIgnore {
		problems = append(problems, fmt.Sprintf("truncate %q is not one of propagate, error, ignore", s.Truncate))
	}
	if s.TLS == "" {
		s.TLS = TLSPreferred
	}
	switch s.TLS {
	case TLSPreferred, TLSDisabled, TLSRequired, TLSVerifyIdentity:
	default:
		problems = append(problems, fmt.Sprintf("tls %q is not one of preferred, disabled, required, verify_identity", s.TLS))
	}
	switch {
	case s.Host == "":
		problems = append(problems, "host is required")
	case s.Port < 1 || s.Port > 65535:
		problems = append(problems, fmt.Sprintf("port %d is not a TCP port", s.Port))
	}
	if s.User == "" {
		problems = append(problems, "user is required")
	}
	if s.Database == "" {
		problems = append(problems, "database is required")
	}
	if len(s.Tables) == 0 {
		problems = append(problems, "tables is empty: list the tables of the database to replicate")
	}
	seen := map[string]bool{}
	for _, t := range s.Tables {
		if t == "" || strings.ContainsAny(t, "`.") {
			problems = append(problems, fmt.Sprintf("table %q: give the bare table name of database %s, without quotes or a database prefix", t, s.Database))
			continue
		}
		if seen[t] {
			problems = append(problems, fmt.Sprintf("table %s is listed twice", t))
		}
		seen[t] = true
	}
	if s.SnapshotLocking != LockingMinimal && s.SnapshotLocking != LockingNone {
		problems = append(problems, fmt.Sprintf("snapshot_locking %q is not one of minimal, none", s.SnapshotLocking))
	}
	if s.ZeroDate != ZeroDateError && s.ZeroDate != ZeroDateNull {
		problems = append(problems, fmt.Sprintf("zero_date %q is not one of error, null", s.ZeroDate))
	}
	if s.SnapshotParallel < 1 || s.SnapshotParallel > MaxParallel {
		problems = append(problems, fmt.Sprintf("snapshot_parallel must be between 1 and %d, got %d", MaxParallel, s.SnapshotParallel))
	}
	if s.BatchSize < 1 {
		problems = append(problems, fmt.Sprintf("batch_size must be positive, got %d", s.BatchSize))
	}
	if s.ServerID == 0 {
		s.ServerID, s.ServerIDDerived = s.defaultServerID(pipeline), true
	}
	if s.WatermarkDatabase == "" {
		s.WatermarkDatabase = s.Database
	}
	// The server id above hashes the tables setting as written, patterns and all: expanding them must not change it.
	exact := s.Tables[:0:0]
	for _, t := range s.Tables {
		if glob.Has(t) {
			s.Patterns = append(s.Patterns, t)
		} else {
			exact = append(exact, t)
		}
	}
	s.Tables = exact
	rules := map[string]protect.Table{}
	for name, opt := range s.TableOptions {
		if !seen[name] && !s.Matches(name) {
			problems = append(problems, fmt.Sprintf("table_options names %s, which is not in tables (nor matched by a pattern there)", name))
			continue
		}
		if opt.Mode != "" && opt.Mode != ModeFullRow {
			problems = append(problems, fmt.Sprintf("table_options.%s.mode %q is not full_row (the only mode of this source)", name, opt.Mode))
		}
		rules[s.Stream(name)] = protect.Table{ExcludeColumns: opt.ExcludeColumns, HashColumns: opt.HashColumns, Where: opt.Where}
	}
	if set, err := protect.Compile("table_options", rules); err != nil {
		problems = append(problems, strings.TrimPrefix(err.Error(), "settings: "))
	} else {
		s.Protect = set
	}
	if len(problems) > 0 {
		return s, fault.ConfigErr(fmt.Errorf("settings: %s", strings.Join(problems, "; ")), "correct the settings named in the message")
	}
	return s, nil
}

// defaultServerID derives a binlog client id from the pipeline's name and what it reads, so two pipelines on one
// server differ without being told (also two over the same tables), and a restart reuses its id (the server
// drops the previous dump thread of the same id, a reconnect does not collide with its own ghost). Without a
// name (an engine that does not send it) the id is the one derived before names were: the same tables, the same
// id, as that engine's pipelines had.
func (s Settings) defaultServerID(pipeline string) uint32 {
	h := fnv.New32a()
	fmt.Fprintf(h, "%s:%d/%s/%s", s.Host, s.Port, s.Database, strings.Join(s.Tables, ","))
	if pipeline != "" {
		// After the old text, with a separator no table list holds, so "" keeps the old hash exactly.
		fmt.Fprintf(h, "\x00pipeline=%s", pipeline)
	}
	return 1_000_000 + h.Sum32()%1_000_000
}

// Stream is the stream name of a table: database.table.
func (s Settings) Stream(table string) string { return s.Database + "." + table }

// QuoteIdent quotes a MySQL identifier.
func QuoteIdent(name string) string { return "`" + strings.ReplaceAll(name, "`", "``") + "`" }

// Params are the connection parameters with TLS mode m.
func (s Settings) Params(m vttls.SslMode) *mysql.ConnParams {
	return &mysql.ConnParams{
		Host: s.Host, Port: s.Port, Uname: s.User, Pass: s.Password, DbName: s.Database,
		SslMode: m, ConnectTimeoutMs: 30_000,
	}
}

// dial connects with the tls setting. vitess's "preferred" sends a TLS request even to a server that does
// not offer TLS (the handshake then fails), so preferred here is: TLS first, then without when that fails
// before authentication.
func (s Settings) dial(ctx context.Context) (*mysql.Conn, error) {
	switch s.TLS {
	case TLSDisabled:
		return mysql.Connect(ctx, s.Params(vttls.Disabled))
	case TLSRequired:
		return mysql.Connect(ctx, s.Params(vttls.Required))
	case TLSVerifyIdentity:
		return mysql.Connect(ctx, s.Params(vttls.VerifyIdentity))
	}
	c, err := mysql.Connect(ctx, s.Params(vttls.Required))
	var se *sqlerror.SQLError
	if err != nil && !(errors.As(err, &se) && se.Number() == sqlerror.ERAccessDeniedError) {
		return mysql.Connect(ctx, s.Params(vttls.Disabled))
	}
	return c, err
}

// Connect opens a connection in UTC with utf8mb4, so every TIMESTAMP arrives as UTC text and every string as
// UTF-8, the same forms the binary log decodes to.
func (s Settings) Connect(ctx context.Context) (*mysql.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	c, err := s.dial(ctx)
	if err != nil {
		return nil, s.Explain(err)
	}
	if _, err := c.ExecuteFetch("SET NAMES utf8mb4, time_zone = '+00:00'", 0, false); err != nil {
		c.Close()
		return nil, s.Explain(err)
	}
	return c, nil
}

// Explain turns a server or network error into a sentence that names the fix, classified for the engine.
func (s Settings) Explain(err error) error {
	if err == nil {
		return nil
	}
	var fe *fault.Error
	if errors.As(err, &fe) {
		return err
	}
	where := fmt.Sprintf("MySQL at %s:%d", s.Host, s.Port)
	var se *sqlerror.SQLError
	if errors.As(err, &se) {
		// The fix goes in the message too: a failed Check reaches the user as its message alone.
		config := func(what, fix string) error {
			return fault.ConfigErr(fmt.Errorf("%s %s (fix: %s): %w", where, what, fix, err), fix)
		}
		switch se.Number() {
		case sqlerror.ERAccessDeniedError:
			return config(fmt.Sprintf("refused user %q", s.User), "check the user and password settings (the user must be allowed to connect from this host)")
		case sqlerror.ERBadDb:
			return config(fmt.Sprintf("has no database %q", s.Database), "check the database setting")
		case sqlerror.ERDBAccessDenied:
			return config(fmt.Sprintf("does not let user %q use database %q", s.User, s.Database), fmt.Sprintf("GRANT SELECT ON `%s`.* TO '%s'", s.Database, s.User))
		case sqlerror.ERTooManyUserConnections, sqlerror.ERConCount:
			return fault.TransientErr(fmt.Errorf("%s has no free connection: %w", where, err))
		case sqlerror.CRConnHostError, sqlerror.CRConnectionError, sqlerror.CRServerGone, sqlerror.CRServerLost:
			return fault.TransientErr(fmt.Errorf("cannot reach %s (check host and port, and that the server listens there): %w", where, err))
		}
		return fmt.Errorf("%s: %w", where, err)
	}
	var netErr *net.OpError
	if errors.As(err, &netErr) {
		return fault.TransientErr(fmt.Errorf("cannot reach %s (%v); check host and port, and that the server listens there: %w", where, netErr.Err, err))
	}
	return fmt.Errorf("%s: %w", where, err)
}
