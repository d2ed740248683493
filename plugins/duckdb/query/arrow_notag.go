//go:build !duckdb_arrow

package query

import (
	"context"
	"database/sql"
	"errors"
	"io"
)

// arrowOut: DuckDB's Arrow results come through duckdb-go's arrow.go, which builds only with the duckdb_arrow
// tag. The Makefile, scripts/release.sh, scripts/test.sh and internal/testplugins set it; a build without it
// answers every format but arrow (and `skippr serve` says why).
func arrowOut(context.Context, *sql.Conn, string, io.Writer) (int64, error) {
	return 0, errors.New("this duckdb plugin was built without the duckdb_arrow tag, so it cannot answer in Arrow (`skippr serve` needs it): build it with -tags duckdb_arrow")
}
