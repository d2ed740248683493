// Package dest is the PostgreSQL destination. An Apply is one transaction: it creates missing tables from
// the Arrow schema, adds new columns, collapses the rows per key (the last change of a key wins), loads the
// surviving rows with COPY into a temporary staging table and merges them (INSERT ... ON CONFLICT DO UPDATE),
// deletes by key, and records the sequence number in <schema>.skippr_state in the same transaction. A
// sequence number at or below the recorded one is skipped, which makes delivery exactly-once.
package dest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/plugin-sdk/values"
	"github.com/skippr-dev/skippr/plugins/postgres/config"
)

// StateTable holds, per pipeline, the last applied sequence number and the last one that touched each stream.
const StateTable = "skippr_state"

// Destination implements the destination role of a serve.SessionDestination (the plugin in main adds Spec and
// Check): a session holds one connection pool.
type Destination struct{}

// New returns a destination.
func New() *Destination { return &Destination{} }

// session is the destination open for one settings value: its parsed settings and connection pool.
type session struct {
	cfg  config.Settings
	pool *pgxpool.Pool
	// nul applies on_unrepresentable to text values holding NUL (stage in apply.go); it lives as long as the
	// session so its replacements are counted and logged once a minute, not once an apply.
	nul *values.Handler
}

// Open parses the settings and connects a pool of up to four connections.
func (d *Destination) Open(ctx context.Context, raw json.RawMessage) (serve.Session, error) {
	cfg, err := config.ParseDestination(raw)
	if err != nil {
		return nil, err
	}
	cc, err := cfg.ConnConfig()
	if err != nil {
		return nil, err
	}
	pc, err := pgxpool.ParseConfig("")
	if err != nil {
		return nil, err
	}
	pc.ConnConfig = cc
	pc.MaxConns = 4
	p, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, cfg.Explain(err)
	}
	if err := p.Ping(ctx); err != nil {
		p.Close()
		return nil, cfg.Explain(err)
	}
	return &session{cfg: cfg, pool: p, nul: values.NewHandler(cfg.Policy, slog.Default())}, nil
}

// Close closes the pool.
func (x *session) Close() error {
	x.pool.Close()
	return nil
}

// Capabilities: exactly-once (the state row commits with the data), deletes, and added columns.
func (d *Destination) Capabilities(_ context.Context, raw json.RawMessage) (serve.Capabilities, error) {
	if _, err := config.ParseDestination(raw); err != nil {
		return serve.Capabilities{}, err
	}
	return serve.Capabilities{ExactlyOnce: true, Deletes: true, SchemaEvolution: true, Truncate: true, Coalesce: true, Resnapshot: true, FullRow: true, RenamedStream: true}, nil
}

// Check connects and checks the right to create tables in the target schema (or the schema itself).
func Check(ctx context.Context, cfg config.Settings) error {
	conn, err := cfg.Connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var exists, canCreate, canUse, canCreateSchema bool
	err = conn.QueryRow(ctx, `
		SELECT n.oid IS NOT NULL,
		       coalesce(has_schema_privilege(n.oid, 'CREATE'), false),
		       coalesce(has_schema_privilege(n.oid, 'USAGE'), false),
		       has_database_privilege(current_database(), 'CREATE')
		FROM (SELECT 1) one LEFT JOIN pg_namespace n ON n.nspname = $1`, cfg.TargetSchema).Scan(&exists, &canCreate, &canUse, &canCreateSchema)
	if err != nil {
		return cfg.Explain(err)
	}
	schema := pgx.Identifier{cfg.TargetSchema}.Sanitize()
	user := pgx.Identifier{cfg.User}.Sanitize()
	switch {
	case !exists && !canCreateSchema:
		return fmt.Errorf("schema %q does not exist and role %q may not create it: run CREATE SCHEMA %s AUTHORIZATION %s, or GRANT CREATE ON DATABASE %s TO %s",
			cfg.TargetSchema, cfg.User, schema, user, pgx.Identifier{cfg.Database}.Sanitize(), user)
	case exists && (!canCreate || !canUse):
		return fmt.Errorf("role %q may not create tables in schema %q: run GRANT USAGE, CREATE ON SCHEMA %s TO %s", cfg.User, cfg.TargetSchema, schema, user)
	}
	return nil
}

// LastApplied reads the pipeline's state row; a pipeline never applied has sequence 0.
func (x *session) LastApplied(ctx context.Context, pipeline string) (serve.Applied, error) {
	cfg := x.cfg
	a := serve.Applied{Streams: map[string]uint64{}}
	var (
		seq     int64
		streams map[string]uint64
	)
	err := x.pool.QueryRow(ctx, `SELECT sequence, streams FROM `+stateTable(cfg)+` WHERE pipeline = $1`, pipeline).Scan(&seq, &streams)
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, pgx.ErrNoRows), errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "3F000"):
		return a, nil // no state table (or schema) yet: nothing applied
	case err != nil:
		return a, fmt.Errorf("read %s: %w", stateTable(cfg), cfg.Explain(err))
	}
	a.Sequence = uint64(seq)
	for k, v := range streams {
		a.Streams[k] = v
	}
	return a, nil
}

func stateTable(cfg config.Settings) string {
	return pgx.Identifier{cfg.TargetSchema, StateTable}.Sanitize()
}

// TableName is the destination table of a stream: its last dot-separated part (public.users → users).
func TableName(stream string) string {
	if i := strings.LastIndexByte(stream, '.'); i >= 0 {
		return stream[i+1:]
	}
	return stream
}

// Apply commits one WAL sequence number, or a coalesced range of them, atomically with its record in the
// state table. Each entry of a range is written into the transaction once its last item arrived, so memory
// holds one entry, not the range.
func (x *session) Apply(ctx context.Context, r *serve.Range) (serve.ApplyResult, error) {
	conn, err := x.pool.Acquire(ctx)
	if err != nil {
		return serve.ApplyResult{}, x.cfg.Explain(err)
	}
	defer conn.Release()
	a := &applier{cfg: x.cfg, conn: conn.Conn(), staged: map[string]bool{}, hints: map[string]bool{}, nul: x.nul}
	return a.apply(ctx, r)
}
