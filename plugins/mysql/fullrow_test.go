package main

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/conformance"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
	"github.com/skippr-dev/skippr/plugins/mysql/source"
	"github.com/skippr-dev/skippr/testkit/mysqltest"
)

// bag is a destination of full_row streams in memory (the streams of tables named k; others are left out):
// per stream, how many times each whole row is held. An
// insert or read adds one, a delete removes one equal row (one the bag lacks is an error: the destination
// would have nothing to match), an update is an error (a full_row stream carries none), a truncate empties.
type bag struct {
	rows map[string]map[string]int
	ops  map[change.Op]int
}

func newBag() *bag { return &bag{rows: map[string]map[string]int{}, ops: map[change.Op]int{}} }

func (b *bag) apply(t testing.TB, c conformance.Chunk) {
	t.Helper()
	for _, it := range c.Items {
		switch {
		case strings.HasSuffix(it.Truncate, ".k"):
			delete(b.rows, it.Truncate)
		case it.Batch != nil && strings.HasSuffix(it.Batch.Stream, ".k"):
			recs, _, err := protocol.DecodeRecords(memory.DefaultAllocator, it.Batch.IPC)
			if err != nil {
				t.Fatalf("decode batch of %s: %v", it.Batch.Stream, err)
			}
			for _, rec := range recs {
				if !change.FullRow(rec.Schema()) || len(change.PrimaryKey(rec.Schema())) > 0 {
					t.Errorf("stream %s: schema not marked full_row without a key: %v", it.Batch.Stream, rec.Schema().Metadata())
				}
				ops, err := change.Ops(rec)
				if err != nil {
					t.Fatal(err)
				}
				if b.rows[it.Batch.Stream] == nil {
					b.rows[it.Batch.Stream] = map[string]int{}
				}
				m := b.rows[it.Batch.Stream]
				for i := 0; i < int(rec.NumRows()); i++ {
					var parts []string
					for j, f := range rec.Schema().Fields() {
						if !strings.HasPrefix(f.Name, change.ReservedPrefix) {
							parts = append(parts, f.Name+"="+cellText(rec.Column(j), i))
						}
					}
					row := strings.Join(parts, " ")
					op := change.Op(ops.Value(i))
					b.ops[op]++
					switch op {
					case change.OpDelete:
						if m[row] == 0 {
							t.Errorf("%s: delete of a row the destination does not hold: %s", it.Batch.Stream, row)
							continue
						}
						m[row]--
						if m[row] == 0 {
							delete(m, row)
						}
					case change.OpUpdate:
						t.Errorf("%s: an update in a full_row stream: %s", it.Batch.Stream, row)
					default:
						m[row]++
					}
				}
				rec.Release()
			}
		}
	}
}

// freshBag is the source's tables now, read by a new snapshot (its own binlog client id).
func freshBag(t *testing.T, set []byte) *bag {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(set, &m); err != nil {
		t.Fatal(err)
	}
	m["server_id"] = 2_000_000 + freshIDs.Add(1)
	fresh, _ := json.Marshal(m)
	b := newBag()
	for _, ch := range readSnapshot(t, fresh, nil) {
		b.apply(t, ch)
	}
	return b
}

// sameBag fails the test when the multisets differ.
func sameBag(t *testing.T, want, got *bag) {
	t.Helper()
	for _, stream := range slices.Sorted(maps.Keys(want.rows)) {
		if !maps.Equal(want.rows[stream], got.rows[stream]) {
			t.Errorf("%s: the source holds %v,\nthe destination %v", stream, want.rows[stream], got.rows[stream])
		}
	}
}

// keyless makes the keyless table k with duplicate rows and NULLs, and the keyed table a with n rows.
func keyless(t *testing.T, db *mysqltest.DB, n int) {
	twoTables(t, db, n)
	db.Exec(t, `CREATE TABLE k (a int, b varchar(10), c double);
		INSERT INTO k VALUES (1, 'x', NULL), (1, 'x', NULL), (1, 'x', NULL), (2, NULL, NULL), (2, NULL, NULL), (3, 'y', 1.5),
			(4, 'z', 2), (4, 'z', 2), (5, NULL, 0), (6, 'w', NULL)`)
}

// changeKeyless inserts a duplicate, updates one of two equal rows, deletes one of two equal rows and one row
// with NULLs.
func changeKeyless(t *testing.T, db *mysqltest.DB) {
	db.Exec(t, `INSERT INTO k VALUES (1, 'x', NULL), (7, NULL, NULL);
		UPDATE k SET c = 9 WHERE a = 4 LIMIT 1;
		DELETE FROM k WHERE a = 2 LIMIT 1;
		UPDATE k SET b = NULL WHERE a = 1 LIMIT 2;
		DELETE FROM k WHERE a = 5`)
}

// TestKeylessFullRow: a keyless table in mode: full_row is copied exactly and its changes are carried matched
// by whole rows, the multiset right with duplicate rows and NULLs: streaming from the snapshot (duplicate
// inserts, an update and a delete of one of two equal rows); a snapshot resumed before the table's copy began
// (under a newer snapshot: the stream from the first one must drop the changes the copy holds); and a snapshot
// resumed in the middle of the table's copy (copied again after a truncate).
func TestKeylessFullRow(t *testing.T) {
	t.Parallel()
	settingsFor := func(db *mysqltest.DB, batch int) []byte {
		return settings(db, map[string]any{"tables": []string{"a", "k"}, "batch_size": batch, "snapshot_parallel": 1,
			"table_options": map[string]any{"k": map[string]any{"mode": "full_row"}}})
	}

	t.Run("stream", func(t *testing.T) {
		t.Parallel()
		db := mysqltest.NewDB(t)
		keyless(t, db, 10)
		set := settingsFor(db, 100)
		r := startReading(t, startPlugin(t), set, nil)
		defer r.Stop()
		b := newBag()
		for {
			ch := r.MustNext(2 * time.Minute)
			b.apply(t, ch)
			if p := position(t, ch.Checkpoint.Position); p.Phase == source.PhaseStream {
				if p.Copied["k"].File == "" {
					t.Errorf("stream position %s has no copy point of k", ch.Checkpoint.Position)
				}
				break
			}
		}
		changeKeyless(t, db)
		catchUp(t, r, b, db)
		if b.ops[change.OpDelete] != 5 || b.ops[change.OpUpdate] != 0 {
			t.Errorf("ops %v: want 5 deletes (3 of them halves of updates), no update", b.ops)
		}
		sameBag(t, freshBag(t, set), b)
	})

	// resume reads a snapshot in one process, keeps the chunks up to the checkpoint pick chooses, changes k,
	// and resumes from it in another: the result must equal the source.
	resume := func(t *testing.T, db *mysqltest.DB, set []byte, pick func(p *source.Position) bool) {
		first := readSnapshot(t, set, nil)
		kill := slices.IndexFunc(first, func(ch conformance.Chunk) bool { return pick(position(t, ch.Checkpoint.Position)) })
		if kill < 0 {
			t.Fatalf("no checkpoint to resume from among %d", len(first))
		}
		b := newBag()
		for _, ch := range first[:kill+1] {
			b.apply(t, ch)
		}
		changeKeyless(t, db)
		r := startReading(t, startPlugin(t), set, first[kill].Checkpoint.Position)
		defer r.Stop()
		catchUp(t, r, b, db)
		sameBag(t, freshBag(t, set), b)
	}

	t.Run("resumed-before-copy", func(t *testing.T) {
		t.Parallel()
		db := mysqltest.NewDB(t)
		keyless(t, db, 500)
		resume(t, db, settingsFor(db, 100), func(p *source.Position) bool {
			_, started := p.Progress["k"]
			return p.Progress["a"].Rows >= 200 && !started
		})
	})

	t.Run("resumed-mid-copy", func(t *testing.T) {
		t.Parallel()
		db := mysqltest.NewDB(t)
		keyless(t, db, 5)
		resume(t, db, settingsFor(db, 3), func(p *source.Position) bool {
			return p.Progress["k"].Rows > 0 && !p.Progress["k"].Done
		})
	})
}

// TestKeylessFullRowRefused: mode: full_row is refused at start for a table with a primary key or a unique key
// over NOT NULL columns, and a keyless table without it is refused as before.
func TestKeylessFullRowRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, ddl, mode, want string }{
		{name: "primary-key", ddl: "CREATE TABLE k (id int PRIMARY KEY, v int)", mode: "full_row", want: "is in mode: full_row but has a primary key (id)"},
		{name: "unique-not-null", ddl: "CREATE TABLE k (id int NOT NULL, v int, UNIQUE KEY uk (id))", mode: "full_row", want: "has the unique key uk over NOT NULL columns"},
		{name: "keyless-no-mode", ddl: "CREATE TABLE k (id int, v int)", want: "has no primary key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := mysqltest.NewDB(t)
			db.Exec(t, tc.ddl)
			opts := map[string]any{}
			if tc.mode != "" {
				opts["k"] = map[string]any{"mode": tc.mode}
			}
			r := startReading(t, startPlugin(t), settings(db, map[string]any{"tables": []string{"k"}, "table_options": opts}), nil)
			defer r.Stop()
			if err := r.Err(time.Minute); !errors.Is(err, fault.ErrConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Read: %v, want a config fault saying %q", err, tc.want)
			}
		})
	}
}
