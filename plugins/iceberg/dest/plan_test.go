package dest

import (
	"testing"

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
