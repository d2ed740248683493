// Package dest is the Snowflake destination. An apply (one WAL sequence number, or a coalesced range of them)
// goes to Snowflake in this order:
//
//  1. outside any transaction, because Snowflake commits an open transaction at every DDL statement: the state
//     table, each stream's table and the columns a grown schema brings are created; the rows of each stream are
//     folded per key (change.Fold: the newest row wins, a delete stays a delete), written as one Parquet file per
//     batch schema, PUT to the table's internal stage under a name made of pipeline, stream and the range's last
//     sequence number (OVERWRITE = TRUE, so a retry replaces the same file), and a temporary staging table is
//     made for each file in the apply's session;
//  2. one transaction: COPY INTO each staging table (MATCH_BY_COLUMN_NAME), MERGE into the table by key (delete,
//     update, insert; a stream without a key appends), MERGE the rows (pipeline, stream, last_sequence) of
//     _SKIPPR_STATE, COMMIT.
//
// With soft_delete, metadata_columns or history (per stream, plugin-sdk/rowmeta: rowmeta.go, history.go) the
// same steps carry more: the added columns are created or added in step 1, each row's metadata values are
// staged in its Parquet file, the MERGE writes them (a delete flags the row instead of removing it), and a
// stream with history has its changes appended to <TABLE>_HISTORY in step 2's transaction.
//
// The state row commits with the data, so LastApplied reads exactly what the table holds; an apply at or below
// it is skipped and, of a range that is partly held, only the items past it are written. Every statement is
// built in package sfsql.
package dest

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	sf "github.com/snowflakedb/gosnowflake"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/plugins/snowflake/sfsql"
)

// Destination applies WAL sequence numbers into Snowflake. It implements serve.SessionDestination.
type Destination struct {
	Version string
	Log     *slog.Logger
	// TempDir holds the Parquet files between their writing and their PUT ("" is the system's).
	TempDir string
	// FoldBudget bounds the bytes of batches an apply holds before it writes them out as Parquet files
	// (0: DefaultFoldBudget); tests set it small to split a range into several chunks.
	FoldBudget int64

	// mu makes calls take turns: the caches below are shared by the sessions (serve.Session) of all settings.
	mu     sync.Mutex
	tables map[string]map[string]sfsql.Type // columns of each table (by quoted name), as last read or made
	state  map[string]bool                  // state table known to exist, by database.schema
	// orphansChecked: the pipeline's orphaned transactions were looked for since the process started or an
	// apply last failed.
	orphansChecked map[string]bool
	// fills: the pipeline's recorded fills (fill.go), read from sfsql.FillTable at its first apply and after
	// a failed one, kept here in between (one process applies a pipeline at a time), so an apply sends no
	// extra statement for them.
	fills     map[string][]fill
	fillsRead map[string]bool
	// intents: the pipeline's recorded table renames not yet committed over (tablerename.go), read with fills.
	intents map[string]map[string]string
	stats   Stats
	// fenceRead, when set (tests), is called after an apply read the pipeline's fence and before its
	// transaction: the window in which a paused writer is overtaken by another.
	fenceRead func(pipeline string, fence uint64)
	// beforeCommit, when set (tests), is called in the apply's transaction after its last statement but the
	// COMMIT: where a process killed mid-apply leaves the transaction open.
	beforeCommit func(pipeline string)
	// afterRename, when set (tests), is called after a table was renamed (to: its new name) for a renamed
	// stream; an error stops the apply there, as a crash would.
	afterRename func(to string) error
	// staged, when set (tests), is called after each Parquet file of a chunk is written, while the chunk's
	// batches, fold and picks are all alive: where an apply's memory peaks.
	staged func()
}

// DefaultFoldBudget: an apply holds at most this many bytes of Arrow batches at once (plus the batch being
// read), whatever the range; what it wrote out waits on disk in TempDir and in the table stage. 64 MiB writes Parquet files of a size Snowflake
// loads efficiently (its guidance: 100–250 MB compressed is the sweet spot, smaller is fine) and keeps the
// plugin's peak well under the engine's 256 MiB default range.
const DefaultFoldBudget = 64 << 20

// MemoryLimit is the Go runtime's soft memory limit the plugin's main sets (unless GOMEMLIMIT is set): four
// times DefaultFoldBudget, room for one chunk, the Parquet writer's and gRPC's buffers, the driver and the
// garbage of the chunk before (the 2M-row backlog's peak RSS: README, Memory).
const MemoryLimit = 256 << 20

// foldRowCost is what each folded row costs beside its batch, counted against the fold budget: its entry in
// the fold's index (change.Fold: a map slot and a Last, ≈ 70 bytes with the map's and slice's growth) and its
// pick when the chunk is written (≈ 56 bytes, more while the pick slices grow). Measured: a heap profile of
// the plugin applying datagen's rows (4 narrow columns) held 71 MB of fold index and 44 MB of picks beside
// 66 MB of batches, so counting the batches alone let a 64 MiB budget hold about three times as much
// (TestChunkWithinFoldBudget).
const foldRowCost = 160

func (d *Destination) foldBudget() int64 {
	if d.FoldBudget > 0 {
		return d.FoldBudget
	}
	return DefaultFoldBudget
}

// Stats counts what the destination sent, for the figures in BENCHMARKS.md.
type Stats struct {
	Applies    int64
	Statements int64 // every request to Snowflake: each is one HTTP round trip (a PUT adds its upload)
	Puts       int64
	BytesPut   int64
	RowsPut    int64
}

var _ serve.SessionDestination = (*Destination)(nil)

func (d *Destination) log() *slog.Logger {
	if d.Log != nil {
		return d.Log
	}
	return slog.Default()
}

// Stats returns the counters so far.
func (d *Destination) Stats() Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stats
}

func (d *Destination) Spec() serve.Spec {
	return serve.Spec{Name: "snowflake", Version: d.Version, Kind: serve.KindDestination,
		Description:    "Snowflake tables, exactly-once: Parquet PUT to the table stage, COPY + MERGE + a state row in one transaction",
		SettingsSchema: json.RawMessage(SettingsSchema)}
}

// Capabilities: exactly-once (the state row commits with the data), deletes, added columns, truncates, and
// coalesced ranges, which is what keeps a warehouse's MERGE to one per apply interval.
// It proposes an apply max_interval of WarehouseApplyInterval, which a connection that leaves
// apply.max_interval out takes: a caught-up pipeline then commits once a minute, not once per WAL entry.
func (d *Destination) Capabilities(_ context.Context, raw json.RawMessage) (serve.Capabilities, error) {
	if _, err := ParseSettings(raw); err != nil {
		return serve.Capabilities{}, err
	}
	return serve.Capabilities{ExactlyOnce: true, Deletes: true, SchemaEvolution: true, Truncate: true, Coalesce: true,
		RenamedStream: true, ApplyDefaults: serve.ApplyDefaults{MaxInterval: WarehouseApplyInterval}}, nil
}

// WarehouseApplyInterval: each commit starts compute that bills by the minute or by the query, so a minute
// between commits bounds the cost of a trickle of changes (the README's worked example).
const WarehouseApplyInterval = time.Minute

// pool opens the connection pool of s; each of its connections is a Snowflake session once used.
func pool(s Settings) (*sql.DB, error) {
	cfg, err := s.Config()
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(sf.NewConnector(sf.SnowflakeDriver{}, *cfg))
	db.SetMaxOpenConns(2)
	return db, nil
}

// Open parses the settings and makes the connection pool the session's calls share; logging in waits for
// the first call.
func (d *Destination) Open(_ context.Context, raw json.RawMessage) (serve.Session, error) {
	s, err := ParseSettings(raw)
	if err != nil {
		return nil, err
	}
	db, err := pool(s)
	if err != nil {
		return nil, err
	}
	return &session{d: d, s: s, db: db}, nil
}

// session is the destination open for one settings value (a serve.Session): its settings and pool.
type session struct {
	d  *Destination
	s  Settings
	db *sql.DB
}

// Close closes the pool, which closes its Snowflake sessions.
func (x *session) Close() error { return x.db.Close() }

// conn is one Snowflake session (one database/sql connection) used for one call, counting its statements.
type conn struct {
	d    *Destination
	s    Settings
	conn *sql.Conn
}

func (d *Destination) conn(ctx context.Context, s Settings, db *sql.DB) (*conn, error) {
	c, err := db.Conn(ctx)
	if err != nil {
		return nil, explain(s, "connect", err)
	}
	return &conn{d: d, s: s, conn: c}, nil
}

func (x *conn) close() { x.conn.Close() }

func (x *conn) exec(ctx context.Context, q string, args ...any) error {
	x.d.stats.Statements++
	_, err := x.conn.ExecContext(ctx, q, args...)
	return err
}

func (x *conn) query(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	x.d.stats.Statements++
	return x.conn.QueryContext(ctx, q, args...)
}

// explain classifies a driver error by the code and SQL state Snowflake answers: a rejected login, a missing
// object, privilege, column or warehouse is the user's to fix (config); a value the table cannot read or hold
// (SQL state class 22, data exception) is the data's (data); a statement Snowflake cannot compile is a bug of
// the plugin's, which no retry mends (config, to report). Anything else — timeouts (57014), lock waits,
// connection faults, internal errors — is left to the engine's retries.
func explain(s Settings, what string, err error) error {
	var se *sf.SnowflakeError
	if !errors.As(err, &se) {
		return fmt.Errorf("snowflake %s: %w", what, err)
	}
	werr := fmt.Errorf("snowflake %s: %w", what, err)
	grants := "run `skippr connect CONNECTION` to list the GRANT statements the role " + roleOf(s) + " needs"
	switch {
	case se.Number == 390100 || se.Number == 390144 || se.Number == 390318 || se.Number == 390303 || se.Number == 390302:
		return fault.ConfigErr(fmt.Errorf("snowflake account %s user %s: %s: login refused: %w", s.Account, s.User, what, err),
			"check the user and its password, private_key (the user's RSA_PUBLIC_KEY must match) or token")
	case se.Number == 3001 || se.SQLState == "42501":
		return fault.ConfigErr(werr, grants)
	case se.Number == 2003 || se.Number == 2043 || se.SQLState == "42S02" || se.SQLState == "02000":
		return fault.ConfigErr(werr, "the object does not exist, or the role "+roleOf(s)+" may not use it: if it was dropped or renamed outside skippr, "+
			"restart the pipeline (the plugin re-reads its tables and creates missing ones; the rows a dropped table held are gone with it, so resnapshot its stream); else "+grants)
	case se.Number == 904:
		return fault.ConfigErr(werr, "a column the plugin writes is missing from the table (dropped or renamed outside skippr): "+
			"restart the pipeline, which re-reads the table's columns and adds the missing one back, or rename it back")
	case se.Number == 606 || se.SQLState == "57P03":
		return fault.ConfigErr(werr, "set warehouse in the connection's settings to a warehouse the role "+roleOf(s)+" may use and that can resume (AUTO_RESUME = TRUE), "+
			"e.g. GRANT USAGE ON WAREHOUSE "+sfsql.Ident(s.Warehouse)+" TO ROLE "+roleIdent(s))
	case strings.HasPrefix(se.SQLState, "22"):
		return fault.DataErr(werr, "Snowflake cannot read or hold a value of this apply (the message names the file, row and column): "+
			"change the value or the column's type in the source, or replicate the table to a destination that holds it; the README's type table lists what each type becomes")
	case se.Number == 1003 || strings.HasPrefix(se.SQLState, "42") || se.SQLState == "0A000":
		return fault.ConfigErr(werr, "Snowflake refused a statement the plugin built: this is a bug of the snowflake plugin; report it with this message (retrying cannot succeed)")
	}
	return werr
}

// roleIdent is the role as a GRANT names it.
func roleIdent(s Settings) string {
	if s.Role == "" {
		return "<the user's default role>"
	}
	return sfsql.Ident(s.Role)
}

func roleOf(s Settings) string {
	if s.Role == "" {
		return "(the user's default role)"
	}
	return s.Role
}

// ensureState creates the state table once per process and schema.
func (x *conn) ensureState(ctx context.Context) error {
	k := x.s.Database + "." + x.s.Schema
	if x.d.state[k] {
		return nil
	}
	if err := x.exec(ctx, sfsql.CreateState(sfsql.Name(x.s.Database), sfsql.Name(x.s.Schema))); err != nil {
		return explain(x.s, "create "+sfsql.StateTable, err)
	}
	if err := x.exec(ctx, sfsql.CreateFill(sfsql.Name(x.s.Database), sfsql.Name(x.s.Schema))); err != nil {
		return explain(x.s, "create "+sfsql.FillTable, err)
	}
	if x.d.state == nil {
		x.d.state = map[string]bool{}
	}
	x.d.state[k] = true
	return nil
}

// readState reads the pipeline's rows: the pipeline's sequence (STREAM ”) and each stream's.
func (x *conn) readState(ctx context.Context, pipeline string) (serve.Applied, error) {
	a := serve.Applied{Streams: map[string]uint64{}}
	rows, err := x.query(ctx, sfsql.ReadState(sfsql.Name(x.s.Database), sfsql.Name(x.s.Schema)), pipeline)
	if err != nil {
		return a, explain(x.s, "read "+sfsql.StateTable, err)
	}
	defer rows.Close()
	for rows.Next() {
		var stream, seq string
		if err := rows.Scan(&stream, &seq); err != nil {
			return a, fmt.Errorf("read %s: %w", sfsql.StateTable, err)
		}
		n, err := strconv.ParseUint(strings.TrimSuffix(seq, ".0"), 10, 64)
		if err != nil {
			return a, fmt.Errorf("%s row (%s, %s): last_sequence %q: %w", sfsql.StateTable, pipeline, stream, seq, err)
		}
		if stream == "" {
			a.Sequence = n
		} else {
			a.Streams[stream] = n
		}
	}
	return a, rows.Err()
}

// LastApplied reads the pipeline's state rows.
func (x *session) LastApplied(ctx context.Context, pipeline string) (serve.Applied, error) {
	x.d.mu.Lock()
	defer x.d.mu.Unlock()
	c, err := x.d.conn(ctx, x.s, x.db)
	if err != nil {
		return serve.Applied{}, err
	}
	defer c.close()
	if err := c.ensureState(ctx); err != nil {
		return serve.Applied{}, err
	}
	return c.readState(ctx, pipeline)
}

// Apply commits one sequence number, or a coalesced range, atomically with its state rows.
func (x *session) Apply(ctx context.Context, r *serve.Range) (serve.ApplyResult, error) {
	x.d.mu.Lock()
	defer x.d.mu.Unlock()
	c, err := x.d.conn(ctx, x.s, x.db)
	if err != nil {
		return serve.ApplyResult{}, err
	}
	defer c.close()
	x.d.stats.Applies++
	return c.apply(ctx, r)
}
