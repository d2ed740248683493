package dest

import (
	"reflect"
	"testing"

	"github.com/skippr-dev/skippr/plugin-sdk/lakequery"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

// The plan names every live data file with exactly the deletes iceberg-go matched to it, the identifier
// fields, and the pipeline's fence; a stream with no table yet is listed as not existing.
func TestPlanTables(t *testing.T) {
	e := newEnv(t, nil)
	us := usersSchema()
	e.apply(1, serve.Item{Stream: "users", Record: batch(t, us, user(opI, 1, "a"), user(opI, 2, "b"), user(opI, 3, "c"))})
	e.apply(2, serve.Item{Stream: "users", Record: batch(t, us, user(opU, 1, "a2"), user(opD, 2, ""))})

	p, err := PlanTables(ctxT(t), e.raw, PlanOptions{Pipeline: "p1", Streams: []string{"users", "later"}})
	if err != nil {
		t.Fatal(err)
	}
	if p.Namespace != "lake" || len(p.Tables) != 2 {
		t.Fatalf("plan %+v: want namespace lake with tables users and later", p)
	}
	users, later := p.Tables[0], p.Tables[1]
	if later.Name != "lake.later" || later.Exists || len(later.Files) != 0 {
		t.Fatalf("later: %+v, want a table that does not exist yet", later)
	}
	if users.Name != "lake.users" || !users.Exists || users.Fence != 2 || len(users.Key) != 1 || users.Key[0] != "id" || len(users.ArrowSchema) == 0 {
		t.Fatalf("users: %+v, want lake.users at fence 2 keyed by id", users)
	}
	data, deletes := tableFiles(t, e.table("users"))
	if len(users.Files) != len(data) {
		t.Fatalf("plan has %d data files, the table %d", len(users.Files), len(data))
	}
	var rows int64
	eqOnFirst := 0
	for _, f := range users.Files {
		rows += f.Rows
		if f.Rows == 3 {
			eqOnFirst = len(f.EqualityDeletes)
		} else if len(f.EqualityDeletes) != 0 {
			// The deletes of apply 2 share its data sequence number: they must not apply to its own rows.
			t.Fatalf("file %s of apply 2 has equality deletes %v", f.Path, f.EqualityDeletes)
		}
	}
	if rows != 4 || eqOnFirst != len(deletes) || eqOnFirst == 0 {
		t.Fatalf("rows %d (want 3+1), deletes on the first file %d (want the table's %d)", rows, eqOnFirst, len(deletes))
	}
	if p, err := PlanTables(ctxT(t), e.raw, PlanOptions{Pipeline: "other"}); err != nil || p.Tables[0].Fence != 0 {
		t.Fatalf("another pipeline's fence: %+v %v, want 0", p, err)
	}
}

// PlanLake plans a table once per snapshot: a second statement over the same snapshot takes the cached plan
// (no manifest scan, and with the catalog unchanged no table load), and an apply (a new metadata location) makes the next statement plan the new snapshot,
// whose files and fence are that snapshot's alone.
func TestPlanLakeCachedPerSnapshot(t *testing.T) {
	e := newEnv(t, nil)
	us := usersSchema()
	e.apply(1, serve.Item{Stream: "users", Record: batch(t, us, user(opI, 1, "a"), user(opI, 2, "b"))})
	req := lakequery.PlanRequest{Pipeline: "p1", Streams: []string{"users"}}
	first, err := e.d.PlanLake(ctxT(t), e.raw, req)
	if err != nil {
		t.Fatal(err)
	}
	second, err := e.d.PlanLake(ctxT(t), e.raw, req)
	if err != nil {
		t.Fatal(err)
	}
	if n := e.d.plans.scans.Load(); n != 1 {
		t.Fatalf("two statements over one snapshot planned the table %d times, want 1", n)
	}
	// Nothing committed in between: the second statement read the catalog's metadata locations and loaded
	// no table (no metadata file read and parsed).
	if n := e.d.plans.loads.Load(); n != 1 {
		t.Fatalf("two statements over an unchanged catalog loaded its tables %d times, want 1", n)
	}
	if !reflect.DeepEqual(first, second) {
		t.Fatalf("the cached plan differs:\n%+v\n%+v", first, second)
	}
	// Other streams asked for (the WAL moved on to another table): planned again, listing that stream.
	other, err := e.d.PlanLake(ctxT(t), e.raw, lakequery.PlanRequest{Pipeline: "p1", Streams: []string{"users", "later"}})
	if err != nil {
		t.Fatal(err)
	}
	if n := e.d.plans.loads.Load(); n != 2 || len(other.Tables) != 2 || other.Tables[1].Name != "lake.later" {
		t.Fatalf("a request for another stream: %d loads in all (want 2), tables %+v", n, other.Tables)
	}

	e.apply(2, serve.Item{Stream: "users", Record: batch(t, us, user(opU, 1, "a2"), user(opI, 3, "c"))})
	third, err := e.d.PlanLake(ctxT(t), e.raw, req)
	if err != nil {
		t.Fatal(err)
	}
	if n := e.d.plans.scans.Load(); n != 2 {
		t.Fatalf("after an apply the table was planned %d times in all, want 2", n)
	}
	if n := e.d.plans.loads.Load(); n != 3 {
		t.Fatalf("after an apply the catalog's tables were loaded %d times in all, want 3", n)
	}
	got, was := third.Tables[0], first.Tables[0]
	if got.SnapshotID == was.SnapshotID || got.Fence != 2 {
		t.Fatalf("after apply 2: snapshot %d fence %d, want a new snapshot (not %d) at fence 2", got.SnapshotID, got.Fence, was.SnapshotID)
	}
	data, _ := tableFiles(t, e.table("users"))
	var rows int64
	for _, f := range got.Files {
		rows += f.Rows
	}
	if len(got.Files) != len(data) || rows != 4 {
		t.Fatalf("plan of the new snapshot: %d files holding %d rows, want the table's %d files holding 2+2", len(got.Files), rows, len(data))
	}
}
