package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/skippr-dev/skippr/engine/failpoint"
	"github.com/skippr-dev/skippr/internal/testplugins"
	"github.com/skippr-dev/skippr/test/harness"
)

// TestServeReclaimBetweenListAndRead stops a `skippr serve` statement at the failpoint lakequery.after-list —
// it has listed the pipeline's WAL entries (600 events committed while the lake's apply was paused) and not read
// their segments — and runs, meanwhile, a `skippr sync --once` that applies those entries to the lake and
// reclaims them: the segments the statement is about to read are deleted under it. Released, the statement
// must answer with every event (the lake, planned after the reclaim, holds them) or fail with a retryable code;
// never leave the 600 out, count them twice, or fail with an error that does not say to retry.
//
// Both WAL backends: a local directory, and a bucket of a real S3-compatible server (versitygw).
func TestServeReclaimBetweenListAndRead(t *testing.T) {
	skippr := testplugins.BuildSkipprWithTags(t, "failpoints")
	for _, backend := range []string{"local", "s3"} {
		t.Run(backend, func(t *testing.T) { serveReclaimBetweenListAndRead(t, skippr, backend) })
	}
}

func serveReclaimBetweenListAndRead(t *testing.T, skippr, backend string) {
	e := harness.NewEnvBinary(t, skippr, "datagen", "iceberg", "duckdb")
	walURL, walExtra := "file://"+filepath.Join(e.Dir, "wal"), ""
	// segments counts the WAL's segment objects.
	segments := func() int { return walFiles(t, filepath.Join(e.Dir, "wal"), "segments") }
	if backend == "s3" {
		b := harness.Versity.Get(t).NewBucket(t)
		walURL = "s3://" + b.Name + "/wal"
		walExtra = fmt.Sprintf("      s3: { endpoint: %s, region: us-east-1, path_style: true }\n", b.Endpoint)
		e.ExtraEnv = []string{"AWS_ACCESS_KEY_ID=" + b.AccessKey, "AWS_SECRET_ACCESS_KEY=" + b.SecretKey}
		segments = func() int {
			out, err := b.Client.ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: aws.String(b.Name), Prefix: aws.String("wal/segments/")})
			if err != nil {
				t.Fatal(err)
			}
			return len(out.Contents)
		}
	}
	gen := func(rows int) string {
		return fmt.Sprintf(`{ seed: 5, rows: %d, batch_size: 100, update_ratio: 0.2, delete_ratio: 0.1 }`, rows)
	}
	config := func(rows int, paused bool) {
		e.WriteConfig(fmt.Sprintf(`connections:
  gen:
    plugin: datagen
    version: "~> 0.1"
    settings: %s
  lake:
    plugin: iceberg
    version: "~> 0.1"
    settings: { catalog: { warehouse: %s }, namespace: lake }
pipelines:
  orders:
    source: gen
    destinations: [lake]
    apply: { paused: %v }
    wal:
      url: %s
      group_commit: { max_bytes: 16KiB, max_delay: 20ms }
%s`, gen(rows), filepath.Join(e.Dir, "lake"), paused, walURL, walExtra))
	}
	config(2000, false)
	e.MustRun("sync", "--once") // the lake holds the first 2000 events
	config(2600, true)
	e.MustRun("sync", "--once") // 600 more, only in the WAL
	if n := segments(); n == 0 {
		t.Fatal("the paused sync left no WAL entry for the statement to list")
	}
	config(2600, false)

	// The answer the statement owes: the source's 2600 events, read from datagen itself.
	want := harness.Want(t, gen(2600))["events"]
	var wantSum int64
	for k := range want {
		id, err := strconv.ParseInt(k, 10, 64)
		if err != nil {
			t.Fatalf("key %q: %v", k, err)
		}
		wantSum += id
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	release := filepath.Join(e.Dir, "release")
	serve := e.StartServe(ctx, []string{failpoint.EnvVar + "=" + failpoint.LakequeryAfterList + "=wait(" + release + ")"})
	const sql = `SELECT count(*)::BIGINT, count(DISTINCT id)::BIGINT, sum(id)::BIGINT FROM events`
	type answer struct {
		rows [][]int64
		err  error
	}
	done := make(chan answer, 1)
	cl := harness.FlightClient(t, serve.Addr)
	go func() {
		rows, err := harness.FlightInt64s(ctx, cl, sql)
		done <- answer{rows, err}
	}()
	fired := "failpoint " + failpoint.LakequeryAfterList + " fired (hit 1)"
	harness.WaitFor(t, 2*time.Minute, func() bool { return strings.Contains(serve.Stderr(), fired) })

	// The statement holds its listing; the sync applies and reclaims every entry in it.
	e.MustRun("sync", "--once")
	if n := segments(); n != 0 {
		t.Fatalf("the sync left %d WAL segments: the entries the statement listed were not all reclaimed", n)
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var got answer
	select {
	case got = <-done:
	case <-ctx.Done():
		t.Fatalf("the statement did not finish after its release:\n%s", serve.Stderr())
	}
	wantRow := []int64{int64(len(want)), int64(len(want)), wantSum}
	switch code := status.Code(got.err); {
	case got.err == nil:
		if len(got.rows) != 1 || !slices.Equal(got.rows[0], wantRow) {
			t.Fatalf("a wrong answer after the reclaim: count, distinct ids, sum of ids %v, want %v", got.rows, wantRow)
		}
		t.Logf("the statement answered right after its entries were reclaimed under it: %v", got.rows[0])
	case code == codes.Unavailable || code == codes.Aborted:
		if !strings.Contains(got.err.Error(), "retry") {
			t.Fatalf("a retryable code without saying to retry: %v", got.err)
		}
		t.Logf("the statement failed retryably: %v", got.err)
	default:
		t.Fatalf("a non-retryable error after the reclaim (%s): %v\n%s", code, got.err, serve.Stderr())
	}
	// The next statement (the point fires once) answers the same from the lake alone.
	if rows, err := harness.FlightInt64s(ctx, cl, sql); err != nil || len(rows) != 1 || !slices.Equal(rows[0], wantRow) {
		t.Fatalf("the next statement: %v %v, want %v", rows, err, wantRow)
	}
}

// walFiles counts the files in a local WAL's folder (segments, commits).
func walFiles(t *testing.T, walDir, folder string) int {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(walDir, folder))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), ".") {
			n++
		}
	}
	return n
}
