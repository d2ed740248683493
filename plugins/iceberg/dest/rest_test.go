package dest

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/apache/iceberg-go/table"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/testkit/seaweedtest"
)

// seaweed is the package's SeaweedFS: an Iceberg REST catalog (SigV4) whose warehouses are S3 table buckets.
// Each test gets a table bucket of its own.
var seaweed seaweedtest.Shared

func TestMain(m *testing.M) {
	code := m.Run()
	seaweed.Stop()
	os.Exit(code)
}

// restSettings are the settings of a destination on srv's REST catalog with the table bucket warehouse,
// signed as SeaweedFS's S3 Tables service; the signing region and keys come from the s3 settings.
func restSettings(srv *seaweedtest.Server, warehouse, accessKey, secretKey string) map[string]any {
	return map[string]any{
		"catalog": map[string]any{"type": "rest", "uri": srv.CatalogURI, "warehouse": warehouse,
			"sigv4": map[string]any{"service": "s3tables"}},
		"s3": map[string]any{"endpoint": srv.S3Endpoint, "region": seaweedtest.Region, "path_style": true,
			"access_key_id": accessKey, "secret_access_key": secretKey},
		"namespace": "lake",
	}
}

// newRESTEnv is an env (see helpers_test.go) on SeaweedFS's REST catalog, in warehouse (a fresh table bucket
// when empty). Envs made with the same warehouse are writers on the same tables.
func newRESTEnv(t *testing.T, warehouse string, extra map[string]any) *env {
	t.Helper()
	srv := seaweed.Get(t)
	if warehouse == "" {
		warehouse = srv.NewTableBucket(t)
	}
	return envWith(t, t.TempDir(), restSettings(srv, warehouse, srv.AccessKey, srv.SecretKey), extra)
}

func (e *env) warehouse() string {
	e.t.Helper()
	s, err := ParseSettings(e.raw)
	if err != nil {
		e.t.Fatal(err)
	}
	return s.Catalog.Warehouse
}

// s3Objects lists the objects under an s3:// location on the package's SeaweedFS, as s3:// locations.
func s3Objects(t *testing.T, location, suffix string) []string {
	t.Helper()
	srv := seaweed.Get(t)
	bucket, prefix, _ := strings.Cut(strings.TrimPrefix(location, "s3://"), "/")
	c := s3.New(s3.Options{Region: seaweedtest.Region, BaseEndpoint: aws.String(srv.S3Endpoint), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(srv.AccessKey, srv.SecretKey, "")})
	var out []string
	p := s3.NewListObjectsV2Paginator(c, &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String(prefix + "/")})
	for p.HasMorePages() {
		page, err := p.NextPage(ctxT(t))
		if err != nil {
			t.Fatalf("list %s: %v", location, err)
		}
		for _, o := range page.Contents {
			if strings.HasSuffix(*o.Key, suffix) {
				out = append(out, "s3://"+bucket+"/"+*o.Key)
			}
		}
	}
	slices.Sort(out)
	return out
}

// Changes of every kind, over several applies, land in a table of the REST catalog whose files are in the S3
// warehouse, and the table read back with iceberg-go equals the changes folded, row by row.
func TestRESTCatalogChangesFoldIntoTable(t *testing.T) {
	ev := dayEvent
	cases := []struct {
		name    string
		stream  string
		extra   map[string]any
		applies [][][]row // applies -> batches -> rows
	}{
		{name: "inserts", stream: "users", applies: [][][]row{{{user(opI, 1, "a"), user(opI, 2, "b"), user(opR, 3, "c")}}}},
		{name: "updates and deletes across applies", stream: "users", applies: [][][]row{
			{{user(opR, 1, "a"), user(opR, 2, "b"), user(opR, 3, "c"), user(opR, 4, "d")}},
			{{user(opU, 1, "a2"), user(opD, 2, ""), user(opI, 5, "e")}},
			{{user(opU, 1, "a3"), user(opU, 5, "e2"), user(opD, 3, "")}},
		}},
		{name: "same key several times in one apply", stream: "users", applies: [][][]row{
			{{user(opI, 1, "a"), user(opU, 1, "a2")}, {user(opU, 1, "a3"), user(opI, 2, "b"), user(opD, 2, "")}},
			{{user(opD, 1, ""), user(opI, 1, "again")}, {user(opI, 3, "c"), user(opU, 3, "c2"), user(opD, 3, ""), user(opI, 3, "c3")}},
		}},
		{name: "nested values change", stream: "users", applies: [][][]row{
			{{user(opI, 1, "a"), r(opI, 2, "b", nil, nil, nil), r(opI, 3, "c", 1.5, map[string]any{"city": nil, "zip": nil}, []any{})}},
			{{r(opU, 2, "b", nil, map[string]any{"city": "x", "zip": 1}, []any{"p", nil, "q"}), r(opU, 1, "a", nil, nil, nil)}},
		}},
		{name: "upsert inserts", stream: "users", extra: map[string]any{"upsert_inserts": true}, applies: [][][]row{
			{{user(opR, 1, "a"), user(opR, 2, "b")}},
			{{user(opR, 1, "a2"), user(opI, 2, "b2")}},
		}},
		{name: "partitioned by day, rows moving between partitions", stream: "events",
			extra: map[string]any{"partitions": map[string]any{"events": []string{"day(ts)"}}}, applies: [][][]row{
				{{ev(opI, 1, 1, "eu", 1), ev(opI, 2, 2, "us", 2), ev(opI, 3, 3, "eu", 3), ev(opI, 4, 1, "us", 4)}},
				{{ev(opU, 1, 1, "eu", 10), ev(opU, 2, 9, "us", 20), ev(opD, 3, 0, "", 0), ev(opI, 5, 2, "eu", 5)}},
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newRESTEnv(t, "", tc.extra)
			sc := usersSchema()
			if tc.stream == "events" {
				sc = eventsSchema()
			}
			for i, ap := range tc.applies {
				var its []serve.Item
				if i == 0 {
					its = append(its, schemaItem(tc.stream, sc))
				}
				for _, rows := range ap {
					its = append(its, items(tc.stream, batch(t, sc, rows...))...)
				}
				if res := e.apply(uint64(i+1), its...); res.Skipped {
					t.Fatalf("apply %d skipped", i+1)
				}
				e.check(tc.stream, tc.stream, "id")
			}
			tbl := e.table(tc.stream)
			// The table lives in the warehouse the settings name, and its files are really there.
			if loc := tbl.Location(); !strings.HasPrefix(loc, e.warehouse()+"/") {
				t.Fatalf("table location %s is not in the warehouse %s", loc, e.warehouse())
			}
			data, deletes := tableFiles(t, tbl)
			onS3 := s3Objects(t, tbl.Location(), ".parquet")
			for _, f := range append(data, deletes...) {
				if _, ok := slices.BinarySearch(onS3, f); !ok {
					t.Fatalf("live file %s is not in the S3 warehouse (which holds %q)", f, onS3)
				}
			}
			if got := tbl.Properties()[seqKey("p1")]; got != fmt.Sprint(len(tc.applies)) {
				t.Fatalf("table fence %q, want %d", got, len(tc.applies))
			}
		})
	}
}

// LastApplied reads the pipeline's sequence back from the catalog, also in a new process; a replayed
// sequence is skipped without touching the tables.
func TestRESTCatalogReplayIsSkipped(t *testing.T) {
	e := newRESTEnv(t, "", nil)
	// Check (what `skippr connect` runs) passes on a table bucket, which refuses writes outside table locations.
	if err := e.d.Check(ctxT(t), e.raw); err != nil {
		t.Fatalf("check: %v", err)
	}
	if a := e.lastApplied(); a.Sequence != 0 || len(a.Streams) != 0 {
		t.Fatalf("last applied before anything: %+v", a)
	}
	applied := applyUsersAndOrders(t, e)

	// A new process: nothing but the catalog remembers.
	e.d.Close()
	e.d = &Destination{Version: "test", Log: testLogger(t)}
	t.Cleanup(func() { e.d.Close() })
	a := e.lastApplied()
	if a.Sequence != 2 || a.Streams["users"] != 2 || a.Streams["orders"] != 1 {
		t.Fatalf("last applied %+v, want sequence 2, users 2, orders 1", a)
	}
	replayIsSkipped(t, e, applied)
	// Another pipeline into the same tables starts from zero.
	e.pipeline = "p2"
	if a := e.lastApplied(); a.Sequence != 0 || len(a.Streams) != 0 {
		t.Fatalf("p2 last applied %+v, want nothing", a)
	}
}

// The REST catalog refuses a snapshot built on a table state that another writer has moved on from with 409,
// which iceberg-go reports as table.ErrCommitFailed — what isConflict takes for "rebuild and retry". (A
// commit of properties alone asserts nothing about snapshots and is accepted on any state, as the spec says.)
func TestRESTCatalogConflictIsCommitFailed(t *testing.T) {
	e := newRESTEnv(t, "", nil)
	sc := eventsSchema()
	e.apply(1, items("events", batch(t, sc, r(opI, 1, nil, "eu", 1)))...)
	stale := e.table("events")
	rows, err := stale.Scan().ToArrowTable(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Release()
	e.apply(2, items("events", batch(t, sc, r(opI, 2, nil, "us", 2)))...)
	_, err = stale.AppendTable(ctxT(t), rows, 1024, nil)
	if err == nil {
		t.Fatal("a snapshot built on a stale table state was accepted")
	}
	if !errors.Is(err, table.ErrCommitFailed) || !isConflict(err) {
		t.Fatalf("stale commit: %v; want table.ErrCommitFailed (isConflict %v)", err, isConflict(err))
	}
	t.Logf("the catalog refused the stale commit: %v", err)
	e.check("events", "events", "id")
}

// Two writers (two destinations, as two processes would be) commit to one table at the same moment: the
// loser's commit is refused by the catalog, rebuilt on the winner's, and both land; the files of the lost
// attempt are removed from the warehouse.
func TestRESTCatalogConcurrentWritersOnOneTable(t *testing.T) {
	a := newRESTEnv(t, "", nil)
	twoWritersOnOneTable(t, a, newRESTEnv(t, a.warehouse(), nil), s3Objects)
}

// Writers racing freely on one table of the REST catalog: every commit lands, none is lost, and each
// pipeline's fence ends at its last sequence.
func TestRESTCatalogConcurrentWritersRace(t *testing.T) {
	first := newRESTEnv(t, "", nil)
	raceWriters(t, []*env{first, newRESTEnv(t, first.warehouse(), nil), newRESTEnv(t, first.warehouse(), nil)}, 3)
}

// Settings that reach a real REST catalog but cannot use it fail every call with an error that names the
// catalog and says what the server said.
func TestRESTCatalogRefusals(t *testing.T) {
	srv := seaweed.Get(t)
	wh := srv.NewTableBucket(t)
	good := func() map[string]any { return restSettings(srv, wh, srv.AccessKey, srv.SecretKey) }
	cases := []struct {
		name     string
		settings map[string]any
		want     []string
		// applyOnly: the settings are wrong only for writing (a warehouse the catalog does not know is an
		// empty catalog to read from).
		applyOnly bool
	}{
		{name: "wrong secret key", settings: restSettings(srv, wh, srv.AccessKey, "not-the-secret"),
			want: []string{"rest catalog " + srv.CatalogURI, "signature"}},
		{name: "unknown access key", settings: restSettings(srv, wh, "AKNOBODY", srv.SecretKey),
			want: []string{"rest catalog " + srv.CatalogURI, "access key ID you provided does not exist"}},
		{name: "no signature", settings: func() map[string]any {
			s := good()
			delete(s["catalog"].(map[string]any), "sigv4")
			return s
		}(), want: []string{"rest catalog " + srv.CatalogURI}},
		{name: "closed port", settings: func() map[string]any {
			s := good()
			s["catalog"].(map[string]any)["uri"] = fmt.Sprintf("http://127.0.0.1:%d", closedPort(t))
			return s
		}(), want: []string{"rest catalog http://127.0.0.1:", "connection refused"}},
		{name: "unknown warehouse", settings: func() map[string]any {
			s := good()
			s["catalog"].(map[string]any)["warehouse"] = "s3://nosuchbucket"
			return s
		}(), want: []string{"namespace lake", "table bucket nosuchbucket not found"}, applyOnly: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := json.Marshal(tc.settings)
			if err != nil {
				t.Fatal(err)
			}
			d := &Destination{Log: testLogger(t)}
			defer d.Close()
			sc := usersSchema()
			errs := map[string]error{}
			_, errs["apply"] = d.Apply(ctxT(t), serve.ApplyRequest{Settings: raw, Pipeline: "p", Sequence: 1,
				Items: items("users", batch(t, sc, user(opI, 1, "a")))})
			if !tc.applyOnly {
				_, errs["last applied"] = d.LastApplied(ctxT(t), raw, "p")
				errs["check"] = d.Check(ctxT(t), raw)
			}
			for call, err := range errs {
				if err == nil {
					t.Fatalf("%s succeeded", call)
				}
				t.Logf("%s: %v", call, err)
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("%s: %q does not contain %q", call, err, w)
					}
				}
			}
		})
	}
	// The same server, warehouse and keys, rightly signed, work: the refusals above are the settings' fault.
	raw, _ := json.Marshal(good())
	d := &Destination{Log: testLogger(t)}
	defer d.Close()
	if _, err := d.LastApplied(ctxT(t), raw, "p"); err != nil {
		t.Fatalf("good settings: %v", err)
	}
}
