// Package config holds the plugin's settings (one object for both roles), how they become connections, and
// how connection errors become sentences a user can act on.
package config

import (
	"context"
	"crypto/tls"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/glob"
	"github.com/skippr-dev/skippr/plugin-sdk/protect"
	"github.com/skippr-dev/skippr/plugin-sdk/rowmeta"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/plugin-sdk/values"
	"github.com/skippr-dev/skippr/plugins/postgres/typemap"
)

// Schema is the JSON Schema of Settings.
//
//go:embed settings.schema.json
var Schema []byte

// Settings of the plugin. The connection settings serve both roles; Tables and the settings after it are the
// source's, TargetSchema the destination's.
type Settings struct {
	Host     string `json:"host"`
	Port     int    `json:"port"`
	User     string `json:"user"`
	Password string `json:"password"`
	Database string `json:"database"`
	SSLMode  string `json:"sslmode"`

	Tables              []string `json:"tables"`
	Publication         string   `json:"publication"`
	Slot                string   `json:"slot"`
	Snapshot            *bool    `json:"snapshot"`
	BatchSize           int      `json:"batch_size"`
	SnapshotParallel    int      `json:"snapshot_parallel"`
	Heartbeat           string   `json:"heartbeat"`
	MaxRetainedWALBytes int64    `json:"max_retained_wal_bytes"`
	SnapshotWait        string   `json:"snapshot_wait_timeout"`
	Truncate            string   `json:"truncate"`
	UnchangedToast      string   `json:"unchanged_toast"`
	OnUnrepresentable   string   `json:"on_unrepresentable"`
	// TableOptions are per-table settings, by table name as in Tables.
	TableOptions map[string]TableOption `json:"table_options"`

	TargetSchema string `json:"schema"`
	// Settings are the destination's soft_delete, metadata_columns and history (plugin-sdk/rowmeta); its
	// table_options are filled from TableOptions (which shadows them in JSON: one key serves both roles), so
	// For(stream) gives each stream's options.
	rowmeta.Settings

	// Parsed forms.
	TableNames []TableName `json:"-"`
	// Patterns are the entries of tables with a wildcard; TableNames holds the exact names until the Read adds
	// the tables they match (Expand), and those created later (source/patterns.go).
	Patterns       []TablePattern            `json:"-"`
	Options        map[TableName]TableOption `json:"-"`
	HeartbeatEvery time.Duration             `json:"-"`
	Policy         values.Policy             `json:"-"`
	// Protect is the tables' exclude_columns and hash_columns, by stream name (nil: none).
	Protect *protect.Set `json:"-"`

	// SnapshotWaitTimeout bounds the creation of a replication slot (source/slotwait.go).
	SnapshotWaitTimeout time.Duration `json:"-"`
}

// Truncate and UnchangedToast values.
const (
	TruncateError       = "error"
	TruncateIgnore      = "ignore"
	TruncatePropagate   = "propagate"
	ToastRequireFull    = "require_full"
	ToastFetch          = "fetch"
	DefaultBatchSize    = 10000
	DefaultParallel     = 4
	MaxParallel         = 16
	DefaultRetainedWAL  = 1 << 30
	DefaultHeartbeat    = 10 * time.Second
	DefaultPublication  = "skippr"
	DefaultSlot         = "skippr"
	DefaultTargetSchema = "public"
)

// DefaultSnapshotWait is snapshot_wait_timeout's default: long enough for a batch job's transaction to end on its
// own, short enough that a forgotten session is a failed pipeline within the hour, not a silent stall.
const DefaultSnapshotWait = 30 * time.Minute

// TableOption is one table's settings: a source's (key_columns, mode, exclude_columns, hash_columns, where)
// for a table named in tables, or a destination's (soft_delete, metadata_columns, history) for a stream, by
// its name as the source emits it. ParseSource and ParseDestination refuse the other role's keys.
type TableOption struct {
	// KeyColumns key a table that has no primary key (or replace the one it has) for the destinations: the
	// columns must be NOT NULL and, together, unique (the destination holds one row per key), and updates and
	// deletes can carry them only under REPLICA IDENTITY FULL, unless they are the replica identity index.
	KeyColumns []string `json:"key_columns"`
	// Mode is "" (follow inserts, updates and deletes by key), ModeAppend: carry inserts only, for a table
	// whose updates and deletes cannot be matched to a row (no key, no REPLICA IDENTITY FULL), or ModeFullRow:
	// follow updates and deletes of a keyless table by its whole old row (REPLICA IDENTITY FULL). The README
	// states the rule.
	Mode string `json:"mode"`
	// ExcludeColumns and HashColumns keep sensitive columns out of everything the source emits
	// (plugin-sdk/protect says how).
	ExcludeColumns []string                `json:"exclude_columns"`
	HashColumns    map[string]protect.Hash `json:"hash_columns"`
	// Where is a row filter, an SQL boolean expression over the table's columns: the snapshot copies the rows
	// it holds for and the publication publishes only their changes (PostgreSQL's row filters; the README says
	// how an update that moves a row in or out of it arrives).
	Where string `json:"where"`

	// The destination's overrides of the connection's soft_delete, metadata_columns and history for this
	// stream (rowmeta.TableSettings; nil keeps the connection's).
	SoftDelete      *bool     `json:"soft_delete,omitempty"`
	MetadataColumns *[]string `json:"metadata_columns,omitempty"`
	History         *bool     `json:"history,omitempty"`
}

// sourceKeys are the source keys the option sets.
func (o TableOption) sourceKeys() []string {
	var keys []string
	if o.KeyColumns != nil {
		keys = append(keys, "key_columns")
	}
	if o.Mode != "" {
		keys = append(keys, "mode")
	}
	if o.ExcludeColumns != nil {
		keys = append(keys, "exclude_columns")
	}
	if o.HashColumns != nil {
		keys = append(keys, "hash_columns")
	}
	if o.Where != "" {
		keys = append(keys, "where")
	}
	return keys
}

// destKeys are the destination keys the option sets.
func (o TableOption) destKeys() []string {
	var keys []string
	if o.SoftDelete != nil {
		keys = append(keys, "soft_delete")
	}
	if o.MetadataColumns != nil {
		keys = append(keys, "metadata_columns")
	}
	if o.History != nil {
		keys = append(keys, "history")
	}
	return keys
}

// Role is the side of a pipeline the settings serve, which decides the table_options keys they may hold.
type Role int

// Roles. RoleEither is a caller that serves both or does not know (Teardown; Check runs each role's
// parse for the roles it checks).
const (
	RoleEither Role = iota
	RoleSource
	RoleDestination
)

// ModeAppend is the table mode that carries inserts (and truncates) only.
const ModeAppend = "append"

// ModeFullRow is the table mode of a keyless table under REPLICA IDENTITY FULL: its stream has no key and is
// matched by full row (change.MatchFullRow), an update carried as a delete of the old row and an insert.
const ModeFullRow = "full_row"

// AppendPublication is the publication that holds the tables in mode: append. It publishes inserts and
// truncates only: PostgreSQL refuses UPDATE and DELETE on a table without a replica identity as soon as a
// publication publishes them, so these tables must not be in the main one.
func (s Settings) AppendPublication() string { return s.Publication + "_append" }

// Append says whether table t is in mode: append.
func (s Settings) Append(t TableName) bool { return s.Options[t].Mode == ModeAppend }

// TableName is a schema-qualified table.
type TableName struct{ Schema, Name string }

// String is the stream name: schema.table, unquoted.
func (t TableName) String() string { return t.Schema + "." + t.Name }

// Quoted is the name for SQL.
func (t TableName) Quoted() string { return pgx.Identifier{t.Schema, t.Name}.Sanitize() }

var slotName = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

// ParseSource is Parse for the source role: table_options holding a destination's key is refused.
func ParseSource(raw json.RawMessage) (Settings, error) { return parse(raw, RoleSource) }

// ParseDestination is Parse for the destination role: table_options holding a source's key is refused.
func ParseDestination(raw json.RawMessage) (Settings, error) { return parse(raw, RoleDestination) }

// Parse decodes and validates settings, filling defaults, for either role: a table_options entry with a
// source key is a source table's (named in tables), one with only destination keys a destination's stream.
func Parse(raw json.RawMessage) (Settings, error) { return parse(raw, RoleEither) }

func parse(raw json.RawMessage, role Role) (Settings, error) {
	var s Settings
	if err := serve.DecodeSettings(raw, &s); err != nil {
		return s, err
	}
	if s.Port == 0 {
		s.Port = 5432
	}
	if s.SSLMode == "" {
		s.SSLMode = "prefer"
	}
	if s.Publication == "" {
		s.Publication = DefaultPublication
	}
	if s.Slot == "" {
		s.Slot = DefaultSlot
	}
	if s.Snapshot == nil {
		t := true
		s.Snapshot = &t
	}
	if s.SnapshotParallel == 0 {
		s.SnapshotParallel = DefaultParallel
	}
	if s.BatchSize == 0 {
		s.BatchSize = DefaultBatchSize
	}
	if s.MaxRetainedWALBytes == 0 {
		s.MaxRetainedWALBytes = DefaultRetainedWAL
	}
	if s.Truncate == "" {
		s.Truncate = TruncatePropagate
	}
	if s.UnchangedToast == "" {
		// fetch by default: it works on every table as it is, where require_full needs REPLICA IDENTITY FULL
		// on each table with TOAST-able columns (README.md, TOAST, says what fetch costs).
		s.UnchangedToast = ToastFetch
	}
	if s.TargetSchema == "" {
		s.TargetSchema = DefaultTargetSchema
	}
	s.HeartbeatEvery = DefaultHeartbeat
	s.SnapshotWaitTimeout = DefaultSnapshotWait
	var problems []string
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
	switch s.SSLMode {
	case "disable", "allow", "prefer", "require", "verify-ca", "verify-full":
	default:
		problems = append(problems, fmt.Sprintf("sslmode %q is not one of disable, allow, prefer, require, verify-ca, verify-full", s.SSLMode))
	}
	if !slotName.MatchString(s.Slot) {
		problems = append(problems, fmt.Sprintf("slot %q: a replication slot name has 1 to 63 lower-case letters, digits and underscores", s.Slot))
	}
	if len(s.Publication) > 63 {
		problems = append(problems, fmt.Sprintf("publication %q is longer than 63 bytes", s.Publication))
	}
	if s.SnapshotParallel < 1 || s.SnapshotParallel > MaxParallel {
		problems = append(problems, fmt.Sprintf("snapshot_parallel must be between 1 and %d, got %d", MaxParallel, s.SnapshotParallel))
	}
	if s.BatchSize < 1 {
		problems = append(problems, fmt.Sprintf("batch_size must be positive, got %d", s.BatchSize))
	}
	if s.MaxRetainedWALBytes < 0 {
		problems = append(problems, "max_retained_wal_bytes must not be negative")
	}
	if s.Heartbeat != "" {
		d, err := time.ParseDuration(s.Heartbeat)
		if err != nil || d <= 0 {
			problems = append(problems, fmt.Sprintf("heartbeat %q is not a positive duration like 10s", s.Heartbeat))
		}
		s.HeartbeatEvery = d
	}
	if s.SnapshotWait != "" {
		d, err := time.ParseDuration(s.SnapshotWait)
		if err != nil || d <= 0 {
			problems = append(problems, fmt.Sprintf("snapshot_wait_timeout %q is not a positive duration like 30m", s.SnapshotWait))
		}
		s.SnapshotWaitTimeout = d
	}
	if s.Truncate != TruncatePropagate && s.Truncate != TruncateError && s.Truncate != TruncateIgnore {
		problems = append(problems, fmt.Sprintf("truncate %q is not one of propagate, error, ignore", s.Truncate))
	}
	if s.UnchangedToast != ToastRequireFull && s.UnchangedToast != ToastFetch {
		problems = append(problems, fmt.Sprintf("unchanged_toast %q is not one of require_full, fetch", s.UnchangedToast))
	}
	if p, err := values.ParsePolicy(s.OnUnrepresentable); err != nil {
		problems = append(problems, err.Error())
	} else {
		s.Policy = p
	}
	seen := map[string]bool{}
	for _, t := range s.Tables {
		tn, pat, err := parseEntry(t)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		if pat != nil {
			s.Patterns = append(s.Patterns, *pat)
			continue
		}
		if seen[tn.String()] {
			problems = append(problems, fmt.Sprintf("table %s is listed twice", tn))
			continue
		}
		seen[tn.String()] = true
		s.TableNames = append(s.TableNames, tn)
	}
	s.Options = map[TableName]TableOption{}
	rules := map[string]protect.Table{}
	var wrongRole []string // a key of the other role's table_options: a config fault naming it and the fix
	s.Settings.TableOptions = map[string]rowmeta.TableSettings{}
	for _, name := range slices.Sorted(maps.Keys(s.TableOptions)) {
		opt := s.TableOptions[name]
		src, dst := opt.sourceKeys(), opt.destKeys()
		switch {
		case role == RoleDestination && len(src) > 0:
			wrongRole = append(wrongRole, fmt.Sprintf("table_options.%s.%s is a source setting, but this connection is the pipeline's destination", name, src[0]))
		case role == RoleSource && len(dst) > 0:
			wrongRole = append(wrongRole, fmt.Sprintf("table_options.%s.%s is a destination setting, but this connection is the pipeline's source", name, dst[0]))
		}
		if len(dst) > 0 {
			// A destination's table_options are keyed by the stream's name, whatever source emits it: not
			// parsed as a table of this database, nor required to be in tables.
			s.Settings.TableOptions[name] = rowmeta.TableSettings{SoftDelete: opt.SoftDelete, MetadataColumns: opt.MetadataColumns, History: opt.History}
		}
		if role == RoleDestination || (len(dst) > 0 && len(src) == 0) {
			continue
		}
		tn, err := ParseTableName(name)
		if err != nil {
			problems = append(problems, "table_options: "+err.Error())
			continue
		}
		if !seen[tn.String()] && !s.Matches(tn) {
			problems = append(problems, fmt.Sprintf("table_options names %s, which is not in tables (nor matched by a pattern there)", tn))
			continue
		}
		switch opt.Mode {
		case "", ModeAppend, ModeFullRow:
		default:
			problems = append(problems, fmt.Sprintf("table_options.%s.mode is %q; the modes are %s (inserts only) and %s (updates and deletes matched by the whole row)", name, opt.Mode, ModeAppend, ModeFullRow))
		}
		if opt.Mode == ModeAppend && len(opt.KeyColumns) > 0 {
			problems = append(problems, fmt.Sprintf("table_options.%s sets both mode: append and key_columns: key_columns follow updates and deletes, mode: append carries inserts only; choose one", name))
		}
		if opt.Mode == ModeFullRow && len(opt.KeyColumns) > 0 {
			problems = append(problems, fmt.Sprintf("table_options.%s sets both mode: full_row and key_columns: key_columns match rows by those columns, mode: full_row by the whole row; choose one", name))
		}
		cols := map[string]bool{}
		for _, c := range opt.KeyColumns {
			if cols[c] {
				problems = append(problems, fmt.Sprintf("table_options.%s.key_columns lists %s twice", name, c))
			}
			cols[c] = true
		}
		opt.Where = strings.TrimSpace(opt.Where)
		s.Options[tn] = opt
		rules[tn.String()] = protect.Table{ExcludeColumns: opt.ExcludeColumns, HashColumns: opt.HashColumns, Where: opt.Where}
	}
	if err := s.Settings.Check(); err != nil {
		problems = append(problems, strings.TrimPrefix(err.Error(), "settings: "))
	}
	if set, err := protect.Compile("table_options", rules); err != nil {
		problems = append(problems, strings.TrimPrefix(err.Error(), "settings: "))
	} else {
		s.Protect = set
	}
	if len(wrongRole) > 0 {
		fix := "move the source's table_options keys (key_columns, mode, exclude_columns, hash_columns, where) to the source connection and soft_delete, metadata_columns and history to the destination connection (a connection serving both roles needs one connection entry per role)"
		return s, fault.ConfigErr(fmt.Errorf("settings: %s", strings.Join(append(wrongRole, problems...), "; ")), fix)
	}
	if len(problems) > 0 {
		return s, fmt.Errorf("settings: %s", strings.Join(problems, "; "))
	}
	return s, nil
}

// ParseTableName reads "table", "schema.table" or the same with "double quoted" parts; an unquoted part is
// folded to lower case as PostgreSQL does.
func ParseTableName(s string) (TableName, error) {
	schema, name, err := splitName(s)
	return TableName{Schema: schema.text, Name: name.text}, err
}

// namePart is one part of a table name as written: its text (an unquoted part folded to lower case) and whether
// it was quoted.
type namePart struct {
	text   string
	quoted bool
}

// splitName reads "table" or "schema.table", each part unquoted or "double quoted"; the schema defaults to public.
func splitName(s string) (schema, name namePart, err error) {
	var parts []namePart
	rest := strings.TrimSpace(s)
	for {
		var part namePart
		if strings.HasPrefix(rest, `"`) {
			var b strings.Builder
			i := 1
			for {
				if i >= len(rest) {
					return schema, name, fmt.Errorf("table %q: unterminated quoted name", s)
				}
				if rest[i] == '"' {
					if i+1 < len(rest) && rest[i+1] == '"' {
						b.WriteByte('"')
						i += 2
						continue
					}
					break
				}
				b.WriteByte(rest[i])
				i++
			}
			part, rest = namePart{text: b.String(), quoted: true}, rest[i+1:]
		} else {
			j := strings.IndexByte(rest, '.')
			if j < 0 {
				j = len(rest)
			}
			part, rest = namePart{text: strings.ToLower(rest[:j])}, rest[j:]
		}
		if part.text == "" {
			return schema, name, fmt.Errorf("table %q: empty name", s)
		}
		parts = append(parts, part)
		if rest == "" {
			break
		}
		if rest[0] != '.' {
			return schema, name, fmt.Errorf("table %q: unexpected %q", s, rest)
		}
		rest = rest[1:]
	}
	switch len(parts) {
	case 1:
		return namePart{text: "public"}, parts[0], nil
	case 2:
		return parts[0], parts[1], nil
	}
	return schema, name, fmt.Errorf("table %q: want schema.table", s)
}

// TablePattern is an entry of tables with a wildcard (plugin-sdk/glob: `*` any run of characters, `?` one) in an
// unquoted part: `shop.*`, `public.orders_*`, `orders_*` (schema public), `"Shop".order_?`. A quoted part is
// matched as it is written (its `*` and `?` are characters of the name); an unquoted one is folded to lower case
// first, as PostgreSQL folds names. Schema and table are matched separately, so `*` never spans the dot.
type TablePattern struct {
	Schema, Name string
	// Literal parts are compared, not matched.
	SchemaLiteral, NameLiteral bool
	// Text is the entry as written, for messages.
	Text string
}

// Match says whether t matches the pattern.
func (p TablePattern) Match(t TableName) bool {
	return part(p.Schema, p.SchemaLiteral, t.Schema) && part(p.Name, p.NameLiteral, t.Name)
}

func part(p string, literal bool, s string) bool {
	if literal {
		return p == s
	}
	return glob.Match(p, s)
}

// parseEntry reads one entry of tables: a name, or a pattern when an unquoted part holds `*` or `?`.
func parseEntry(s string) (TableName, *TablePattern, error) {
	schema, name, err := splitName(s)
	if err != nil {
		return TableName{}, nil, err
	}
	if (schema.quoted || !glob.Has(schema.text)) && (name.quoted || !glob.Has(name.text)) {
		return TableName{Schema: schema.text, Name: name.text}, nil, nil
	}
	return TableName{}, &TablePattern{Schema: schema.text, Name: name.text, SchemaLiteral: schema.quoted || !glob.Has(schema.text),
		NameLiteral: name.quoted || !glob.Has(name.text), Text: strings.TrimSpace(s)}, nil
}

// Matches says whether a table matches one of the patterns.
func (s Settings) Matches(t TableName) bool {
	return slices.ContainsFunc(s.Patterns, func(p TablePattern) bool { return p.Match(t) })
}

// Expand adds to TableNames, after the exact names and in name order, the tables of existing that a pattern
// matches. A pattern matching none is a config fault naming it when first is set (the pipeline's first start):
// it is most likely misspelt. Later an empty match is fine (its tables were dropped, or are yet to be created).
func (s *Settings) Expand(existing []TableName, first bool) error {
	if len(s.Patterns) == 0 {
		return nil
	}
	names := slices.Clone(existing)
	slices.SortFunc(names, func(a, b TableName) int { return strings.Compare(a.String(), b.String()) })
	var none []string
	for _, p := range s.Patterns {
		if !slices.ContainsFunc(names, p.Match) {
			none = append(none, p.Text)
		}
	}
	if first && len(none) > 0 {
		return fault.ConfigErr(fmt.Errorf("settings: tables: pattern %s matches no table", strings.Join(none, ", ")),
			"correct the pattern (`*` any characters, `?` one; unquoted parts are folded to lower case, \"quoted\" ones kept), or create a matching table first")
	}
	for _, n := range names {
		if s.Matches(n) && !slices.Contains(s.TableNames, n) {
			s.TableNames = append(s.TableNames, n)
		}
	}
	return nil
}

func quoteDSN(v string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}

// connString is a keyword/value string: nothing is read from the environment or files, as the plugin has
// neither (settings travel in the calls).
func (s Settings) connString() string {
	return fmt.Sprintf("host=%s port=%d user=%s password=%s dbname=%s sslmode=%s application_name=skippr connect_timeout=15",
		quoteDSN(s.Host), s.Port, quoteDSN(s.User), quoteDSN(s.Password), quoteDSN(s.Database), s.SSLMode)
}

// ConnKey identifies the server, role and database a session opened with these settings talks to, and how:
// two settings with the same key open interchangeable sessions (source/warm.go hands a check's to the Read).
// It holds the password: compare it, never log it.
func (s Settings) ConnKey() string { return s.connString() }

// ConnConfig is the configuration of an ordinary session.
func (s Settings) ConnConfig() (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(s.connString())
	if err != nil {
		return nil, fmt.Errorf("connection settings: %w", err)
	}
	for k, v := range typemap.SessionParams {
		cfg.RuntimeParams[k] = v
	}
	return cfg, nil
}

// ReplicationConfig is the configuration of a logical replication session.
func (s Settings) ReplicationConfig() (*pgconn.Config, error) {
	cfg, err := pgconn.ParseConfig(s.connString() + " replication=database")
	if err != nil {
		return nil, fmt.Errorf("connection settings: %w", err)
	}
	for k, v := range typemap.SessionParams {
		cfg.RuntimeParams[k] = v
	}
	// A cancel request would end START_REPLICATION with an error; an expired context must only interrupt
	// the read, which is what a deadline does.
	cfg.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: c.Conn()}
	}
	dial := cfg.DialFunc
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &coalescingConn{Conn: c}, nil
	}
	return cfg, nil
}

// The walsender sends every change as its own write. A reader that keeps up therefore reads one change
// per syscall and parks its goroutine between them, which cost the plugin more CPU than decoding the
// change (measured: BENCHMARKS.md). Once streaming (CoalesceReads), after a short read coalescingConn
// waits coalesceWait before reading again, so the changes sent meanwhile arrive in one read. A change
// waits at most that long, against the engine's group commit of 200 ms; a reader that is behind gets full
// reads and never waits. Commands before streaming are not slowed.
const (
	coalesceWait  = time.Millisecond
	coalesceBelow = 4 << 10
)

type coalescingConn struct {
	net.Conn
	on    atomic.Bool
	short bool // the last read returned less than coalesceBelow
}

func (c *coalescingConn) Read(p []byte) (int, error) {
	if c.short && c.on.Load() {
		time.Sleep(coalesceWait)
	}
	n, err := c.Conn.Read(p)
	c.short = n < coalesceBelow
	return n, err
}

// CoalesceReads makes a replication session opened by ConnectReplication gather the changes the server
// sends into fewer reads; call it once the session streams.
func CoalesceReads(c *pgconn.PgConn) {
	nc := c.Conn()
	if t, ok := nc.(*tls.Conn); ok {
		nc = t.NetConn()
	}
	if cc, ok := nc.(*coalescingConn); ok {
		cc.on.Store(true)
	}
}

// Connect opens an ordinary session, explaining a failure.
func (s Settings) Connect(ctx context.Context) (*pgx.Conn, error) {
	cfg, err := s.ConnConfig()
	if err != nil {
		return nil, err
	}
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, s.Explain(err)
	}
	return c, nil
}

// ConnectReplication opens a logical replication session, explaining a failure.
func (s Settings) ConnectReplication(ctx context.Context) (*pgconn.PgConn, error) {
	cfg, err := s.ReplicationConfig()
	if err != nil {
		return nil, err
	}
	c, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, s.Explain(err)
	}
	return c, nil
}

// Explain turns a connection or statement error into a sentence that says what is wrong and what to do,
// keeping the original error wrapped.
func (s Settings) Explain(err error) error {
	if err == nil {
		return nil
	}
	where := fmt.Sprintf("PostgreSQL at %s:%d", s.Host, s.Port)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "28P01":
			return fault.ConfigErr(fmt.Errorf("%s refused user %q: wrong password (check the password setting): %w", where, s.User, err),
				"set the connection's password to the role's password")
		case "28000":
			return fault.ConfigErr(fmt.Errorf("%s refused user %q for database %q: %s (pg_hba.conf needs a line allowing this host, user and database): %w", where, s.User, s.Database, pgErr.Message, err),
				"add a pg_hba.conf line allowing this host, user and database, then reload the server")
		case "3D000":
			return fault.ConfigErr(fmt.Errorf("%s has no database %q (check the database setting): %w", where, s.Database, err),
				"set the connection's database to an existing database")
		case "42501":
			return fault.ConfigErr(fmt.Errorf("%s: user %q lacks a privilege: %s: %w", where, s.User, pgErr.Message, err),
				"grant the role the privilege the message names (`skippr connect` runs the full check)")
		case "42P01", "42704":
			// A table, or a publication or slot-related object, named in the settings does not exist.
			return fault.ConfigErr(fmt.Errorf("%s: %s: %w", where, pgErr.Message, err),
				"create the missing object, or correct the connection's settings that name it")
		case "55000":
			// object_not_in_prerequisite_state: wal_level below logical, among others.
			return fault.ConfigErr(fmt.Errorf("%s: %s: %w", where, pgErr.Message, err),
				"change the server's configuration the message names (for wal_level: ALTER SYSTEM SET wal_level = logical, then restart)")
		case "58P01":
			// undefined_file on START_REPLICATION: the WAL the slot needs was removed.
			return fault.ResnapshotErr(fmt.Errorf("%s: %s: %w", where, pgErr.Message, err),
				"re-snapshot: run `skippr teardown PIPELINE`, then sync the pipeline under a new name and wal.url so its tables are copied again")
		case "53300":
			return fault.TransientErr(fmt.Errorf("%s has no free connection slot (max_connections or the role's connection limit): %w", where, err))
		case "57P03":
			return fault.TransientErr(fmt.Errorf("%s is starting up or shutting down; try again: %w", where, err))
		}
		return fmt.Errorf("%s: %w", where, err)
	}
	var netErr *net.OpError
	if errors.As(err, &netErr) {
		return fault.TransientErr(fmt.Errorf("cannot reach %s (%v); check host and port, and that the server listens there: %w", where, netErr.Err, err))
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return fmt.Errorf("cannot resolve host %q: %w", s.Host, err)
	}
	if strings.Contains(err.Error(), "server refused TLS connection") {
		return fault.ConfigErr(fmt.Errorf("%s does not offer TLS but sslmode is %s: %w", where, s.SSLMode, err),
			"set sslmode to disable or prefer, or enable TLS on the server")
	}
	return fmt.Errorf("%s: %w", where, err)
}
