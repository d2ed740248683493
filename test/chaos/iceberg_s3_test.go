package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/internal/testplugins"
	"github.com/skippr-dev/skippr/plugin-sdk/conformance"
	"github.com/skippr-dev/skippr/plugin-sdk/lakequery"
	"github.com/skippr-dev/skippr/test/harness"
)

// TestS3LakeWithAutoCompactSurvivesSIGKILL runs datagen into a lake whose warehouse is a bucket of a real
// S3-compatible server (versitygw; the SQLite catalog stays local), with background compaction after applies,
// SIGKILLing the sync at random moments: during applies, commits and compactions alike. The table must then
// equal the source row by row, auto_compact must have kept its file count down, and `skippr query` (which copies
// the S3 files for DuckDB) must agree with the source.
func TestS3LakeWithAutoCompactSurvivesSIGKILL(t *testing.T) {
	e := harness.NewEnv(t)
	b := harness.Versity.Get(t).NewBucket(t)
	const maxFiles = 4
	lakeSettings := fmt.Sprintf(`{"catalog": {"path": %q, "warehouse": "s3://%s/wh"}, "namespace": "lake",
		"s3": {"endpoint": %q, "region": "us-east-1", "path_style": true, "access_key_id": %q, "secret_access_key": %q},
		"auto_compact": {"max_data_files": %d, "max_delete_files": %d}}`,
		filepath.Join(e.Dir, "catalog.db"), b.Name, b.Endpoint, b.AccessKey, b.SecretKey, maxFiles, maxFiles)
	gen := `{ seed: 24, rows: 20000, rows_per_second: 5000, batch_size: 400, nested: true, update_ratio: 0.2, delete_ratio: 0.05 }`
	e.WriteDatagenLakeConfig(gen, strings.Join(strings.Fields(lakeSettings), " "), "64KiB")

	kills := 6
	e.KillSyncAtRandom(kills, 500*time.Millisecond, 2500*time.Millisecond)
	e.MustRun("sync", "--once")
	n := harness.LakeEqualsSource(t, lakeSettings, gen)

	// Without compaction the table would hold a data file per apply (dozens); a compaction killed half-way
	// leaves at most the files of the applies after the last one that finished.
	plan, err := conformance.Start(t, testplugins.Build(t, "iceberg"), nil).LakePlan(context.Background(), []byte(lakeSettings), lakequery.PlanRequest{Streams: []string{"events"}, FetchDir: t.TempDir()})
	if err != nil || len(plan.Tables) != 1 {
		t.Fatalf("plan (%v): %+v", err, plan)
	}
	files := plan.Tables[0].Files
	if len(files) == 0 || len(files) > 2*maxFiles {
		t.Fatalf("the table holds %d data files; auto_compact at %d should keep it near that", len(files), maxFiles)
	}
	for _, f := range files {
		if !strings.HasPrefix(f.Location, "s3://"+b.Name+"/wh/") {
			t.Fatalf("data file %s is not in the S3 warehouse", f.Location)
		}
	}

	// The query plugin reads copies of the S3 files; its answer must be the source's.
	want := harness.Want(t, gen)["events"]
	var sum int64
	for k := range want {
		id, err := strconv.ParseInt(k, 10, 64)
		if err != nil {
			t.Fatalf("key %q: %v", k, err)
		}
		sum += id
	}
	r := e.MustRun("query", "--json", "SELECT count(*) AS n, sum(id) AS s FROM events")
	var got struct {
		N json.Number `json:"n"`
		S json.Number `json:"s"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.Stdout)), &got); err != nil {
		t.Fatalf("query output: %v\n%s", err, r.Stdout)
	}
	if got.N.String() != strconv.Itoa(len(want)) || got.S.String() != strconv.FormatInt(sum, 10) {
		t.Fatalf("skippr query: count %s, sum %s; the source has %d rows summing to %d", got.N, got.S, len(want), sum)
	}
	t.Logf("%d SIGKILLs; the S3 lake's %d rows equal the source's in %d data files; skippr query agrees", kills, n, len(files))
}
