package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/plugins/postgres/source"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// TestWalLevelLowered is issue #28's "wal_level lowered" on PostgreSQL 15: the setting only changes at a
// restart, and a server holding a logical replication slot refuses to start with wal_level below logical
// ("logical replication slot … exists, but wal_level < logical"). So the change cannot lose a row: the
// source sees the server down (a transient error, retried) until the operator sets wal_level back, and the
// slot then still holds every change committed before, which the stream delivers exactly once. (Dropping the
// slot first, the only way to start with a lower wal_level, is the lost-slot case: a re-snapshot fault, which
// test/e2e TestPostgresSourceFaultsFailAtOnce covers.)
func TestWalLevelLowered(t *testing.T) {
	t.Parallel()
	srv := pgtest.StartServer(t, pgtest.Options{})
	db := srv.NewDB(t)
	db.Exec(t, `CREATE TABLE a (id int PRIMARY KEY)`)
	insert := func(from, to int) {
		db.Exec(t, fmt.Sprintf(`INSERT INTO a SELECT g FROM generate_series(%d, %d) g`, from, to))
	}
	src := startPlugin(t)
	set := settings(db, map[string]any{"tables": []string{"a"}, "slot": slot(db)})
	r := startReading(t, src, set, nil)
	for position(t, r.mustNext(time.Minute).cp.Position).Phase != source.PhaseStream {
	}
	insert(1, 50)
	var last []byte
	for n := int64(0); n < 50; {
		c := r.mustNext(time.Minute)
		n += c.rows
		last = c.cp.Position
	}
	r.stop()
	insert(51, 100) // committed, not yet streamed: in the slot only

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	err := srv.Restart(ctx, map[string]string{"wal_level": "replica"})
	if err == nil || !strings.Contains(err.Error(), "wal_level") {
		t.Fatalf("PostgreSQL started with wal_level = replica and a logical slot (%v): the premise of this test, and of the README's claim, is gone", err)
	}
	if err := srv.Restart(ctx, map[string]string{"wal_level": "logical"}); err != nil {
		t.Fatal(err)
	}
	insert(101, 150)
	r = startReading(t, src, set, last)
	defer r.stop()
	var n int64
	for n < 100 {
		n += r.mustNext(2 * time.Minute).rows
	}
	if n != 100 {
		t.Fatalf("after wal_level went back to logical the stream delivered %d rows, want the 100 committed since the last checkpoint", n)
	}
}
