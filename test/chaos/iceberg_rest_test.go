package chaos

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/test/harness"
	"github.com/skippr-dev/skippr/testkit/seaweedtest"
)

// TestDatagenToIcebergRESTSurvivesSIGKILL runs datagen (inserts, updates, deletes, nested columns) through
// `skippr sync` into Iceberg tables of a real REST catalog — SeaweedFS's, SigV4-signed, its warehouse an S3
// table bucket — SIGKILLing the engine at random moments, then reads the table back through the same catalog
// (deletes applied) and compares it with what the source produced, row by row: exactly once.
func TestDatagenToIcebergRESTSurvivesSIGKILL(t *testing.T) {
	srv := seaweedtest.New(t)
	warehouse := srv.NewTableBucket(t)
	e := harness.NewEnv(t)
	gen := `{ seed: 23, rows: 20000, rows_per_second: 4000, batch_size: 400, nested: true, update_ratio: 0.2, delete_ratio: 0.05 }`
	// The keys reach the plugin the way users pass secrets: ${ENV} in skippr.yml, expanded by the engine.
	e.ExtraEnv = append(e.ExtraEnv, "SEAWEED_ACCESS_KEY="+srv.AccessKey, "SEAWEED_SECRET_KEY="+srv.SecretKey)
	settings := func(accessKey, secretKey string) string {
		b, err := json.Marshal(map[string]any{
			"catalog": map[string]any{"type": "rest", "uri": srv.CatalogURI, "warehouse": warehouse, "sigv4": map[string]any{"service": "s3tables"}},
			"s3": map[string]any{"endpoint": srv.S3Endpoint, "region": seaweedtest.Region, "path_style": true,
				"access_key_id": accessKey, "secret_access_key": secretKey},
			"namespace": "lake",
		})
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	e.WriteDatagenLakeConfig(gen, settings("${SEAWEED_ACCESS_KEY}", "${SEAWEED_SECRET_KEY}"), "96KiB")

	// The source needs 5 s of running time: most kills land while it reads, the WAL commits and the plugin
	// writes to S3 and commits to the catalog.
	kills := 6
	e.KillSyncAtRandom(kills, 500*time.Millisecond, 2*time.Second)
	e.MustRun("sync", "--once")

	// The same settings, keys written out, for reading the lake outside the engine.
	n := harness.LakeEqualsSource(t, settings(srv.AccessKey, srv.SecretKey), gen)
	// The engine reclaims WAL entries only up to what the destination reports applied (read back from the
	// catalog's namespace properties): all of it, once the sync has caught up.
	var st []struct {
		WAL struct {
			LastCommitted    uint64 `json:"last_committed"`
			ReclaimedThrough uint64 `json:"reclaimed_through"`
		} `json:"wal"`
	}
	out := e.MustRun("status", "--json").Stdout
	if err := json.Unmarshal([]byte(out), &st); err != nil || len(st) != 1 {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	if w := st[0].WAL; w.LastCommitted == 0 || w.ReclaimedThrough != w.LastCommitted {
		t.Fatalf("WAL committed through %d but reclaimed through %d: the destination did not report everything applied", w.LastCommitted, w.ReclaimedThrough)
	}
	t.Logf("%d SIGKILLs; the REST catalog's table holds the source's %d rows exactly", kills, n)
}
