package query

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/skippr-dev/skippr/plugin-sdk/lakequery"
)

// TestQueryMemoryLimit: the request's memory limit is the query's. A result that cannot spill (one list of
// 40M integers, ≈ 320 MB) fails under 64MB with ErrMemory naming the limit, and answers without it; a small
// query answers under it.
func TestQueryMemoryLimit(t *testing.T) {
	ask := func(sql, limit string) (string, error) {
		var in, out bytes.Buffer
		if _, err := lakequery.NewWriter(&in, lakequery.Request{SQL: sql, Format: "csv", MemoryLimit: limit}); err != nil {
			t.Fatal(err)
		}
		_, err := Answer(context.Background(), &in, &out, Options{TempDir: t.TempDir()})
		return out.String(), err
	}
	const big = "SELECT len(list(range)) AS n FROM range(40000000)"
	_, err := ask(big, "64MB")
	if !errors.Is(err, lakequery.ErrMemory) || !strings.Contains(err.Error(), "memory_limit 64MB") {
		t.Fatalf("under 64MB: %v, want ErrMemory naming the limit", err)
	}
	if out, err := ask(big, ""); err != nil || out != "n\n40000000\n" {
		t.Fatalf("without a limit: %q %v", out, err)
	}
	if out, err := ask("SELECT 41 + 1 AS n", "64MB"); err != nil || out != "n\n42\n" {
		t.Fatalf("a small query under 64MB: %q %v", out, err)
	}
}
