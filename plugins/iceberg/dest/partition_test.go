package dest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

func TestParsePartitionField(t *testing.T) {
	cases := []struct {
		in, source, transform, err string
	}{
		{in: "day(created_at)", source: "created_at", transform: "day"},
		{in: "bucket(16, id)", source: "id", transform: "bucket[16]"},
		{in: " truncate( 4 ,name ) ", source: "name", transform: "truncate[4]"},
		{in: "region", source: "region", transform: "identity"},
		{in: "hour(ts)", source: "ts", transform: "hour"},
		{in: "bucket(id)", err: "bucket needs a number"},
		{in: "day(3, ts)", err: "day takes only a column"},
		{in: "weekly(ts)", err: "unknown transform weekly"},
		{in: "bucket(0, id)", err: "positive number"},
		{in: "day(ts", err: "want transform(column)"},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			pf, err := ParsePartitionField(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if pf.Source != tc.source || pf.Transform.String() != tc.transform {
				t.Fatalf("got %s %s, want %s %s", pf.Source, pf.Transform, tc.source, tc.transform)
			}
		})
	}
}

func eventsSchema() *arrow.Schema {
	return change.Schema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "ts", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, Nullable: true},
		{Name: "region", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "amount", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	}, []string{"id"})
}

// dayEvent is an events row on day d of March 2026; a delete carries only the key.
func dayEvent(op change.Op, id, d int, region string, amount int) row {
	if op == opD {
		return r(op, id, nil, nil, nil)
	}
	return r(op, id, time.Date(2026, 3, d, 12, 30, 0, 0, time.UTC), region, amount)
}

// Updates and deletes reach rows in every partition, including rows whose update moves them to another
// partition, and deletes that carry only the key.
func TestPartitionedUpdatesAndDeletes(t *testing.T) {
	ev := dayEvent
	cases := []struct {
		name   string
		fields []string
		// global: deletes must be written under the unpartitioned spec (a partition source is not a key).
		global bool
	}{
		{name: "day of a non-key column", fields: []string{"day(ts)"}, global: true},
		{name: "bucket of the key", fields: []string{"bucket(16, id)"}},
		{name: "identity and day", fields: []string{"region", "day(ts)"}, global: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, map[string]any{"partitions": map[string]any{"events": tc.fields}})
			sc := eventsSchema()
			var first []row
			for id := 1; id <= 12; id++ {
				first = append(first, ev(opI, id, 1+id%4, []string{"eu", "us"}[id%2], id))
			}
			e.apply(1, append([]serve.Item{schemaItem("events", sc)}, items("events", batch(t, sc, first...))...)...)
			e.check("events", "events", "id")
			e.apply(2, items("events", batch(t, sc,
				ev(opU, 1, 1+1%4, "eu", 100), // same partition
				ev(opU, 2, 9, "us", 200),     // moves to another day
				ev(opU, 3, 3, "us", 300),     // moves region, stays on its day
				ev(opD, 4, 0, "", 0),         // delete with the key only
				ev(opD, 5, 0, "", 0),
				ev(opI, 13, 2, "eu", 13),
				ev(opU, 13, 7, "us", 14), // inserted and moved in one apply
			))...)
			e.check("events", "events", "id")
			e.apply(3, items("events", batch(t, sc, ev(opD, 2, 0, "", 0), ev(opU, 6, 1, "eu", 600), ev(opD, 13, 0, "", 0)))...)
			e.check("events", "events", "id")

			tbl := e.table("events")
			spec := tbl.Spec()
			if spec.NumFields() != len(tc.fields) || spec.ID() == 0 {
				t.Fatalf("table spec %s (id %d), want %d fields in a spec after the unpartitioned spec 0", spec, spec.ID(), len(tc.fields))
			}
			tasks, err := tbl.Scan().PlanFiles(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			var deletes int
			for _, task := range tasks {
				if task.File.SpecID() != int32(spec.ID()) || len(task.File.Partition()) != len(tc.fields) {
					t.Errorf("data file %s: spec %d partition %v, want the table spec %d", task.File.FilePath(), task.File.SpecID(), task.File.Partition(), spec.ID())
				}
				for _, del := range task.EqualityDeleteFiles {
					deletes++
					if tc.global && (del.SpecID() != 0 || len(del.Partition()) != 0) {
						t.Errorf("equality delete %s: spec %d partition %v, want global (spec 0)", del.FilePath(), del.SpecID(), del.Partition())
					}
					if !tc.global && (del.SpecID() != int32(spec.ID()) || len(del.Partition()) == 0) {
						t.Errorf("equality delete %s: spec %d partition %v, want partition-scoped", del.FilePath(), del.SpecID(), del.Partition())
					}
				}
			}
			if deletes == 0 {
				t.Fatal("no equality delete applies to any data file")
			}
		})
	}
}

// A table partitioned elsewhere on a non-key column, without an unpartitioned spec, cannot take global
// deletes: updates are refused with a message that says why; inserts still work.
func TestForeignPartitionedTableWithoutUnpartitionedSpec(t *testing.T) {
	e := newEnv(t, nil)
	sc := eventsSchema()
	ice, err := newTableSchema("events", sc, []string{"id"})
	if err != nil {
		t.Fatal(err)
	}
	oc := e.catalog()
	if err := ensureNamespace(ctxT(t), oc.cat, []string{"lake"}); err != nil {
		t.Fatal(err)
	}
	spec, err := iceberg.NewPartitionSpecOpts(iceberg.AddPartitionFieldByName("ts", "ts_day", iceberg.DayTransform{}, ice, nil))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := oc.cat.CreateTable(ctxT(t), []string{"lake", "events"}, ice, catalog.WithPartitionSpec(&spec), catalog.WithProperties(iceberg.Properties{"format-version": "2"})); err != nil {
		t.Fatal(err)
	}
	ts := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	e.apply(1, items("events", batch(t, sc, r(opI, 1, ts, "eu", 1)))...)
	e.check("events", "events", "id")
	_, err = e.d.Apply(ctxT(t), serve.ApplyRequest{Settings: e.raw, Pipeline: e.pipeline, Sequence: 2, Items: items("events", batch(t, sc, r(opD, 1, nil, nil, nil)))})
	if err == nil || !strings.Contains(err.Error(), "no unpartitioned partition spec") {
		t.Fatalf("err = %v, want a refusal naming the missing unpartitioned spec", err)
	}
}
