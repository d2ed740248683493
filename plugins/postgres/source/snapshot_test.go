package source

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/plugins/postgres/config"
	"github.com/skippr-dev/skippr/plugins/postgres/typemap"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// collected is an Emitter that keeps each stream's copied (id, v) rows: this test drives copyTables directly.
type collected struct{ rows map[string]map[int32]int32 }

func (c *collected) Batch(_ context.Context, stream string, rec arrow.RecordBatch) error {
	ids, vs := rec.Column(0).(*array.Int32), rec.Column(1).(*array.Int32)
	if c.rows[stream] == nil {
		c.rows[stream] = map[int32]int32{}
	}
	for i := range int(rec.NumRows()) {
		c.rows[stream][ids.Value(i)] = vs.Value(i)
	}
	return nil
}
func (c *collected) SchemaChange(context.Context, serve.Stream) error   { return nil }
func (c *collected) Truncate(context.Context, string) error             { return nil }
func (c *collected) Resnapshot(context.Context, string, bool) error     { return nil }
func (c *collected) Checkpoint(context.Context, serve.Checkpoint) error { return nil }

// Every parallel reader must see the snapshot of the transaction it was handed, not one of its own: here
// rows change after that transaction's snapshot and before any reader starts, so a reader with a snapshot
// of its own would copy the changed rows.
func TestParallelReadersShareTheSnapshot(t *testing.T) {
	db := pgtest.NewDB(t)
	ctx := context.Background()
	names := []string{"a", "b", "c"}
	for _, n := range names {
		db.Exec(t, `CREATE TABLE `+n+` (id int PRIMARY KEY, v int NOT NULL); INSERT INTO `+n+` SELECT g, 0 FROM generate_series(1, 100) g`)
	}
	raw, _ := json.Marshal(map[string]any{"host": db.Server.Host, "port": db.Server.Port, "user": "postgres", "database": db.Name,
		"sslmode": "disable", "tables": names, "batch_size": 30, "snapshot_parallel": 3})
	cfg, err := config.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := openPool(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	out := &collected{rows: map[string]map[int32]int32{}}
	r := &reader{cfg: cfg, pool: pool, out: out, mem: memory.DefaultAllocator, resolver: typemap.NewResolver(),
		tables: map[string]*table{}, announced: map[string]string{}, log: slog.New(slog.DiscardHandler)}
	for _, tn := range cfg.TableNames {
		tb, err := loadTable(ctx, pool, r.resolver, tn)
		if err != nil {
			t.Fatal(err)
		}
		r.tables[tn.String()] = tb
	}
	tx, err := r.beginSnapshot(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1`); err != nil { // takes the transaction's snapshot
		t.Fatal(err)
	}
	db.Exec(t, `UPDATE a SET v = 1; UPDATE b SET v = 1; UPDATE c SET v = 1; INSERT INTO c VALUES (101, 1)`)

	next := &Position{V: positionVersion, Phase: PhaseSnapshot, LSN: "0/0", Tables: r.tableNames(), Progress: map[string]TableProgress{}}
	if err := r.copyTables(ctx, tx, next, 300); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		got := out.rows["public."+n]
		if len(got) != 100 {
			t.Errorf("%s: %d rows copied, want the 100 of the snapshot", n, len(got))
		}
		for id, v := range got {
			if v != 0 {
				t.Errorf("%s: row %d copied with v = %d: its reader did not use the snapshot it was handed", n, id, v)
				break
			}
		}
		if p := next.Progress["public."+n]; !p.Done || p.Rows != 100 {
			t.Errorf("%s: progress %+v, want done after 100 rows", n, p)
		}
	}
}
