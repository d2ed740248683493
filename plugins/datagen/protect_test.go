package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/client"
	"github.com/skippr-dev/skippr/plugin-sdk/conformance"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
)

// TestProtect: exclude_columns and hash_columns remove amount and replace name by its HMAC (computed here from
// the README's rule) in every event; a key or unknown column is refused. Datagen cannot re-snapshot, so new
// rules on a running pipeline are refused with a fix datagen can follow (start the pipeline over: the same
// events are generated again), and a start from the first event under the new rules works.
func TestProtect(t *testing.T) {
	c, err := client.Start(context.Background(), client.Config{Path: conformance.Build(t, ".")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Kill()
	const base = `{"seed": 3, "rows": 40, "batch_size": 16, "update_ratio": 0.3, "delete_ratio": 0.1`
	rules := func(salt string) []byte {
		return []byte(base + `, "exclude_columns": ["amount"], "hash_columns": {"name": {"salt": "` + salt + `"}}}`)
	}
	// read runs a Read from cp until its idle checkpoint; it returns the folded names by id and that checkpoint.
	read := func(settings, cp []byte) (map[int64]string, []byte, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		rs, err := c.Read(ctx, settings, nil, cp)
		if err != nil {
			return nil, nil, err
		}
		names := map[int64]string{}
		for {
			m, err := rs.Next()
			if err != nil {
				return nil, nil, err
			}
			if m.Checkpoint != nil && m.Checkpoint.Idle {
				return names, m.Checkpoint.Position, nil
			}
			if m.Batch == nil {
				continue
			}
			recs, _, err := protocol.DecodeRecords(memory.DefaultAllocator, m.Batch.IPC)
			if err != nil {
				t.Fatal(err)
			}
			for _, rec := range recs {
				if len(rec.Schema().FieldIndices("amount")) > 0 && strings.Contains(string(settings), "exclude_columns") {
					t.Fatalf("the excluded column amount was emitted: %v", rec.Schema())
				}
				ops, _ := change.Ops(rec)
				ids := rec.Column(rec.Schema().FieldIndices("id")[0]).(*array.Int64)
				col := rec.Column(rec.Schema().FieldIndices("name")[0]).(*array.String)
				for i := 0; i < int(rec.NumRows()); i++ {
					if change.Op(ops.Value(i)) == change.OpDelete {
						delete(names, ids.Value(i))
					} else {
						names[ids.Value(i)] = col.Value(i)
					}
				}
				rec.Release()
			}
		}
	}
	want := func(salt string) map[int64]string {
		out := map[int64]string{}
		for id, r := range readmeState(readmeSettings{Seed: ptr(uint64(3)), Rows: 40, UpdateRatio: 0.3, DeleteRatio: 0.1}) {
			m := hmac.New(sha256.New, []byte(salt))
			m.Write([]byte(r.name))
			out[id] = hex.EncodeToString(m.Sum(nil))
		}
		return out
	}
	same := func(what string, got, want map[int64]string) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %d rows, want %d", what, len(got), len(want))
		}
		for id, w := range want {
			if got[id] != w {
				t.Fatalf("%s: id %d name %q, want %q", what, id, got[id], w)
			}
		}
	}

	got, cp, err := read(rules("salt-one"), nil)
	if err != nil {
		t.Fatal(err)
	}
	same("first run", got, want("salt-one"))
	if _, _, err := read(rules("salt-one"), cp); err != nil {
		t.Fatalf("a restart under the same rules: %v", err)
	}
	_, _, err = read(rules("salt-two"), cp)
	if !errors.Is(err, fault.ErrConfig) || !strings.Contains(err.Error(), "exclude_columns or hash_columns of stream events changed") ||
		!strings.Contains(fault.FixOf(err), "rename the pipeline and give it a new wal url") || strings.Contains(err.Error()+fault.FixOf(err), "salt-") {
		t.Fatalf("a restart under another salt: %v (class %v, fix %q), want a config fault with datagen's fix and no salt", err, fault.ClassOf(err), fault.FixOf(err))
	}
	// The fix: the pipeline started over reads every event again, under the new rules.
	got, _, err = read(rules("salt-two"), nil)
	if err != nil {
		t.Fatal(err)
	}
	same("started over", got, want("salt-two"))
	// A pipeline that ran without rules is refused when rules come, too.
	_, plain, err := read([]byte(base+`}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := read(rules("salt-one"), plain); !errors.Is(err, fault.ErrConfig) {
		t.Fatalf("rules added to a running pipeline: %v, want a config fault", err)
	}

	for _, tc := range []struct{ rules, err string }{
		{`"exclude_columns": ["id"]`, "key column id cannot be excluded"},
		{`"hash_columns": {"mail": {"salt": "x"}}`, "table events has no column mail (hashed)"},
		{`"exclude_columns": ["address"]`, "table events has no column address (excluded)"},
	} {
		if err := c.Check(context.Background(), []byte(base+`, `+tc.rules+`}`)); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("check with %s: %v, want %q", tc.rules, err, tc.err)
		}
	}
}

func ptr[T any](v T) *T { return &v }
