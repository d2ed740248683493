package dest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/skippr-dev/skippr/plugins/duckdb/ducksql"
)

// dumpLockWait is short: a dump waits only for a plugin that is closing the file.
const dumpLockWait = 3 * time.Second

// Dump writes the rows of a stream's table as JSON lines (DuckDB's to_json, timestamps in UTC), ordered by
// the PRIMARY KEY of a table an older build created, else by its columns in table order: the plugin creates
// tables without one (tableDDL), in the source's column order, whose key usually leads. It opens the file
// read-only, so it runs beside nothing that writes the file: it is for checks from outside the engine.
func Dump(ctx context.Context, raw json.RawMessage, stream string, w io.Writer) error {
	s, err := ParseSettings(raw)
	if err != nil {
		return err
	}
	db, err := Open(ctx, s.Path, true, dumpLockWait)
	if err != nil {
		return err
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("database %s: %w", s.Path, err)
	}
	defer conn.Close()
	if ok, err := tableExists(ctx, conn, s.Schema, TableName(stream)); err != nil {
		return fmt.Errorf("database %s: %w", s.Path, err)
	} else if !ok {
		return fmt.Errorf("database %s has no table %s.%s", s.Path, s.Schema, TableName(stream))
	}
	if _, err := conn.ExecContext(ctx, "SET TimeZone = 'UTC'"); err != nil {
		return fmt.Errorf("database %s: %w", s.Path, err)
	}
	var key []any
	err = conn.QueryRowContext(ctx, `SELECT constraint_column_names FROM duckdb_constraints()
		WHERE database_name = current_database() AND lower(schema_name) = lower(?) AND lower(table_name) = lower(?)
		AND constraint_type = 'PRIMARY KEY'`, s.Schema, TableName(stream)).Scan(&key)
	var by []string
	for _, k := range key {
		by = append(by, fmt.Sprint(k))
	}
	if len(by) == 0 {
		// Not ORDER BY ALL: that is the select list, the rows' JSON text (10 before 2).
		if by, err = columnNames(ctx, conn, s.Schema, TableName(stream)); err != nil {
			return fmt.Errorf("database %s: columns of %s: %w", s.Path, TableName(stream), err)
		}
	}
	order := "ALL"
	if len(by) > 0 {
		order = quoteAll(by)
	}
	name := ducksql.Ident(s.Schema) + "." + ducksql.Ident(TableName(stream))
	rows, err := conn.QueryContext(ctx, "SELECT to_json(t)::VARCHAR FROM "+name+" AS t ORDER BY "+order)
	if err != nil {
		return fmt.Errorf("database %s: read %s: %w", s.Path, name, err)
	}
	defer rows.Close()
	bw := bufio.NewWriter(w)
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return fmt.Errorf("database %s: read %s: %w", s.Path, name, err)
		}
		bw.WriteString(line)
		bw.WriteByte('\n')
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("database %s: read %s: %w", s.Path, name, err)
	}
	return bw.Flush()
}

// Exec runs SQL statements on the destination's file, in one transaction, with the destination's schema first on
// the search path. It is for repairs and tests from outside the engine (a damaged table a re-snapshot repairs):
// it waits for the file lock like a dump, so nothing else may write the file meanwhile.
func Exec(ctx context.Context, raw json.RawMessage, statements string) error {
	s, err := ParseSettings(raw)
	if err != nil {
		return err
	}
	db, err := Open(ctx, s.Path, false, dumpLockWait)
	if err != nil {
		return err
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("database %s: %w", s.Path, err)
	}
	defer conn.Close()
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("database %s: %w", s.Path, err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "SET search_path = "+ducksql.Literal(s.Schema)); err != nil {
		return fmt.Errorf("database %s: %w", s.Path, err)
	}
	if _, err := tx.ExecContext(ctx, statements); err != nil {
		return fmt.Errorf("database %s: %w", s.Path, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("database %s: commit: %w", s.Path, err)
	}
	return nil
}
