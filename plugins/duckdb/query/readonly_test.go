package query

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestQueryIsReadOnly tries what `skippr serve` and `skippr query` must refuse: writing a file, attaching a
// database file, installing or loading an extension, reading a file or URL the plans do not name, reading
// the environment, and switching the guard back off. Each fails and leaves nothing behind, while the lake's
// views (which read the plans' files) still answer in every format.
func TestQueryIsReadOnly(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret.csv")
	if err := os.WriteFile(secret, []byte("password\nhunter2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	written := filepath.Join(dir, "out.csv")
	attached := filepath.Join(dir, "x.duckdb")
	t.Setenv("SKIPPR_TEST_SECRET", "hunter2")
	for _, format := range []string{"table", "csv"} {
		for _, sql := range []string{
			"COPY (SELECT * FROM people) TO '" + written + "'",
			"COPY people TO '" + written + "' (FORMAT csv)",
			"SELECT 1; COPY (SELECT 1) TO '" + written + "'",
			"ATTACH '" + attached + "' AS x",
			"INSTALL httpfs",
			"LOAD httpfs",
			"SELECT * FROM read_csv('" + secret + "')",
			"SELECT * FROM read_text('" + secret + "')",
			"SELECT * FROM '" + secret + "'",
			"SELECT * FROM glob('" + dir + "/*')",
			"SELECT * FROM read_parquet('https://example.com/x.parquet')",
			"SELECT getenv('SKIPPR_TEST_SECRET') AS v",
			"SET enable_external_access = true",
			"SET lock_configuration = false",
			"SET allowed_directories = ['/']",
			"RESET enable_external_access",
		} {
			out, _, err := run(t, sql, format, false)
			if err == nil {
				t.Errorf("%s (%s): accepted, answered %q", sql, format, out)
			}
			if strings.Contains(out, "hunter2") || (err != nil && strings.Contains(err.Error(), "hunter2")) {
				t.Errorf("%s (%s): the secret leaked: %q %v", sql, format, out, err)
			}
		}
	}
	for _, f := range []string{written, attached} {
		if _, err := os.Stat(f); err == nil {
			t.Errorf("%s was written", f)
		}
	}
	for _, format := range []string{"table", "csv", "json", "parquet"} {
		if out, _, err := run(t, "SELECT count(*) AS n FROM people", format, false); err != nil || out == "" {
			t.Errorf("the lake in %s: %q %v", format, out, err)
		}
	}
}
