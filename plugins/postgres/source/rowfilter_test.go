package source

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// TestResnapshotWithChangedFilter follows the fix a changed row filter is refused with: the publication gets
// the new filter (the statements the refusal gives), and a re-snapshot of the table copies the rows the new
// filter holds for, while rows move in and out of it between the chunks, and removes the others. Without the
// ALTER the Read is refused, naming it.
func TestResnapshotWithChangedFilter(t *testing.T) {
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL); ALTER TABLE t REPLICA IDENTITY FULL;
		INSERT INTO t SELECT g, g FROM generate_series(1, 600) g`)
	pub := "rf_" + db.Name
	set := func(where string) json.RawMessage {
		raw, _ := json.Marshal(map[string]any{"host": db.Server.Host, "port": db.Server.Port, "user": "postgres", "database": db.Name,
			"sslmode": "disable", "tables": []string{"public.t"}, "batch_size": 50, "slot": "rf_" + db.Name, "publication": pub,
			"table_options": map[string]any{"public.t": map[string]any{"where": where}}})
		return raw
	}
	s := New()
	out := newFolded()
	readUntil(t, s, serve.ReadRequest{Settings: set("v % 2 = 0")}, out, func() bool { return out.idle })
	conn := db.Connect(t)
	sameRows(t, conn, "t WHERE v % 2 = 0", out.rows["public.t"])
	from := out.last

	// The new filter with the re-snapshot, but the publication still has the old one: refused with the fix.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := s.Read(ctx, serve.ReadRequest{Settings: set("v % 3 = 0"), Checkpoint: from, Resnapshot: []string{"public.t"}}, newFolded())
	if !errors.Is(err, fault.ErrConfig) || !strings.Contains(err.Error(), `ADD TABLE "public"."t" WHERE (v % 3 = 0)`) {
		t.Fatalf("Read with a new filter the publication lacks: %v, want a config fault with the ALTER PUBLICATION", err)
	}
	fix := err.Error()[strings.Index(err.Error(), "BEGIN;"):]
	fix = fix[:strings.Index(fix, "COMMIT")+len("COMMIT")]
	db.Exec(t, fix)

	// Rows move in and out of the new filter while the chunks are read.
	moved := 0
	s.chunkRead = func(ctx context.Context, _ string, keys []string) {
		if len(keys) == 0 {
			return
		}
		if _, err := conn.Exec(ctx, `UPDATE t SET v = v + 1 WHERE id = $1::int OR id = $1::int + 200`, keys[0]); err != nil {
			t.Errorf("move rows: %v", err)
		}
		moved++
	}
	readUntil(t, s, serve.ReadRequest{Settings: set("v % 3 = 0"), Checkpoint: from, Resnapshot: []string{"public.t"}}, out, func() bool {
		return len(out.marks) == 2 && out.idle
	})
	if moved < 5 {
		t.Fatalf("%d chunks saw rows move: the test tests nothing", moved)
	}
	sameRows(t, conn, "t WHERE v % 3 = 0", out.rows["public.t"])
}
