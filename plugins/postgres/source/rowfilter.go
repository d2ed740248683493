package source

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/skippr-dev/skippr/plugins/postgres/config"
)

// Row filters (table_options.<table>.where) are PostgreSQL's own publication row filters (PostgreSQL 15): the
// publication publishes only the changes of rows the filter holds for, and the snapshot's SELECT has the same
// WHERE (queryChunks), so the copy and the stream agree on which rows the destination has. pgoutput turns an
// UPDATE whose old row matched and new row does not into a DELETE of the old row, and the reverse into an
// INSERT of the new one ("Row Filters", UPDATE transformations); the old row is known only under REPLICA
// IDENTITY FULL or when the filter names replica identity columns only, which PostgreSQL enforces by refusing
// the table's UPDATE and DELETE otherwise.
//
// The filter is checked at start by the server itself (probeFilter), since only it knows what it can apply,
// and it must be the filter the publication has: a publication this plugin creates gets it; one that exists
// (made by hand, or by an earlier run with another filter) is compared, and a difference is refused with the
// statements that fix it. Changing the filter of a running pipeline is refused by the checkpoint's fingerprint
// (plugin-sdk/protect) until the table is re-snapshotted.

// publicationFilter is the WHERE clause t has in a publication's table list ("" without a filter).
func (t *table) publicationFilter() string {
	if t.Filter == "" {
		return ""
	}
	return " WHERE (" + t.Filter + ")"
}

// beginner opens a transaction: a *pgx.Conn or a *pgxpool.Pool.
type beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// probeFilter has the server check t's filter as a publication will apply it, in a transaction it rolls back:
// it creates a publication of t with the filter (PostgreSQL refuses a filter with a volatile function, a
// user-defined type or function, a column the table lacks, a non-boolean expression) and reads the filter as the
// server deparsed it, the form pg_publication_tables.rowfilter shows. When the publication publishes updates and
// deletes it also plans an UPDATE of t: PostgreSQL refuses that when the filter names a column outside the
// replica identity, as it would refuse every UPDATE and DELETE of the table once such a publication exists.
//
// refused is the server's reason, for a config problem; ok is false when the role may not create a publication
// of t (it must own the table), and the filter can then only be compared as written.
func probeFilter(ctx context.Context, db beginner, t *table, updates bool) (deparsed, refused string, ok bool, err error) {
	var suffix [6]byte
	_, _ = rand.Read(suffix[:])
	probe := pgx.Identifier{"skippr_probe_" + hex.EncodeToString(suffix[:])}.Sanitize()
	tx, err := db.Begin(ctx)
	if err != nil {
		return "", "", false, err
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // a probe: nothing of it may stay
	publish := "insert"
	if updates {
		publish = "insert, update, delete"
	}
	_, err = tx.Exec(ctx, fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s%s WITH (publish = '%s', publish_via_partition_root = true)",
		probe, t.Name.Quoted(), t.publicationFilter(), publish))
	if refused, ok, err := serverRefusal(err); refused != "" || !ok || err != nil {
		return "", refused, ok, err
	}
	if err := tx.QueryRow(ctx, `SELECT rowfilter FROM pg_publication_tables WHERE pubname = $1`,
		strings.Trim(probe, `"`)).Scan(&deparsed); err != nil {
		return "", "", false, err
	}
	if updates && len(t.Columns) > 0 {
		c := pgx.Identifier{t.Columns[0].Name}.Sanitize()
		_, err = tx.Exec(ctx, fmt.Sprintf("EXPLAIN UPDATE %s SET %s = %s WHERE false", t.Name.Quoted(), c, c))
		if refused, ok, err := serverRefusal(err); refused != "" || !ok || err != nil {
			return "", refused, ok, err
		}
	}
	return deparsed, "", true, nil
}

// serverRefusal sorts a probe statement's error: the server's reason for refusing the filter, a lacking
// privilege (ok false), or another failure.
func serverRefusal(err error) (refused string, ok bool, _ error) {
	if err == nil {
		return "", true, nil
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return "", false, err
	}
	if pgErr.Code == "42501" { // insufficient_privilege: not the table's owner, no CREATE on the database
		return "", false, nil
	}
	reason := pgErr.Message
	if pgErr.Detail != "" {
		reason += ": " + pgErr.Detail
	}
	if pgErr.Hint != "" {
		reason += " (" + pgErr.Hint + ")"
	}
	return reason, true, nil
}

// filterProblems checks every table's row filter against the server and against the publication that carries
// the table: the main one, or the append one for a table in mode: append. A table the publication does not
// hold yet is no problem here: ensurePublication and publish add it with its filter (publicationProblems
// reports a publication made by hand that lacks it).
func filterProblems(ctx context.Context, db interface {
	beginner
	querier
}, cfg config.Settings, tables []*table) (Problems, error) {
	var out Problems
	for _, t := range tables {
		pub := cfg.Publication
		if t.Append {
			pub = cfg.AppendPublication()
		}
		want, ok := t.Filter, false
		if t.Filter != "" {
			deparsed, refused, probed, err := probeFilter(ctx, db, t, !t.Append)
			if err != nil {
				return nil, fmt.Errorf("check the row filter of %s: %w", t.Name, cfg.Explain(err))
			}
			if refused != "" {
				out = append(out, fmt.Sprintf("table_options.%s.where (%s) cannot be a row filter of the table: PostgreSQL says: %s", t.Name, t.Filter, refused))
				continue
			}
			if probed {
				want, ok = deparsed, true
			}
		}
		var have *string
		err := db.QueryRow(ctx, `SELECT rowfilter FROM pg_publication_tables WHERE pubname = $1 AND schemaname = $2 AND tablename = $3`,
			pub, t.Name.Schema, t.Name.Name).Scan(&have)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read publication %s: %w", pub, cfg.Explain(err))
		}
		if sameFilter(have, want, ok) {
			continue
		}
		p := pgx.Identifier{pub}.Sanitize()
		fix := fmt.Sprintf("BEGIN; ALTER PUBLICATION %s DROP TABLE %s; ALTER PUBLICATION %s ADD TABLE %s%s; COMMIT",
			p, t.Name.Quoted(), p, t.Name.Quoted(), t.publicationFilter())
		then := fmt.Sprintf("while no pipeline streams through it, and if a pipeline already carried the table under the other filter, re-snapshot it (skippr resnapshot PIPELINE %s)", t.Name)
		switch {
		case have == nil:
			out = append(out, fmt.Sprintf("publication %q publishes every row of %s, but table_options.%s.where filters them (%s): the stream would carry rows the snapshot leaves out: give the publication the filter: %s, %s",
				pub, t.Name, t.Name, t.Filter, fix, then))
		case t.Filter == "":
			out = append(out, fmt.Sprintf("publication %q filters the rows of %s (WHERE %s), but table_options.%s sets no where: the snapshot would copy rows whose changes never come: set table_options.%s.where: %q, or drop the publication's filter: %s, %s",
				pub, t.Name, *have, t.Name, t.Name, *have, fix, then))
		default:
			out = append(out, fmt.Sprintf("publication %q filters the rows of %s by %s, but table_options.%s.where is %s: make them the same: set where to the publication's filter, or give the publication the setting's: %s, %s",
				pub, t.Name, *have, t.Name, t.Filter, fix, then))
		}
	}
	return out, nil
}

// sameFilter says whether the publication's filter (have; nil: none) is the wanted one: the server's deparsed
// form when probed, else the setting as written (the deparsed form wraps it in parentheses).
func sameFilter(have *string, want string, probed bool) bool {
	if have == nil || want == "" {
		return have == nil && want == ""
	}
	if probed {
		return *have == want
	}
	return *have == want || *have == "("+want+")"
}
