package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/client"
	"github.com/skippr-dev/skippr/plugin-sdk/conformance"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
)

// row is one id's final values; nested columns as text ("city/zip/tag,tag").
type row struct {
	seq    int64
	name   string
	amount float64
	ts     time.Time
	nested string
}

// readmeSettings are the settings the README's rule reads.
type readmeSettings struct {
	Seed        *uint64 `json:"seed"`
	Rows        int64   `json:"rows"`
	Nested      bool    `json:"nested"`
	UpdateRatio float64 `json:"update_ratio"`
	DeleteRatio float64 `json:"delete_ratio"`
}

// The README's rule, written from its text (plugins/datagen/README.md, "The events"), not from gen's code.
func readmeMix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

var (
	readmeWords  = strings.Fields("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima")
	readmeCities = strings.Fields("Lisbon Oslo Quito Accra Hanoi Perth Tbilisi Lima")
)

func readmeState(s readmeSettings) map[int64]row {
	seed := uint64(1)
	if s.Seed != nil {
		seed = *s.Seed
	}
	out := map[int64]row{}
	for i := int64(0); i < s.Rows; i++ {
		h := readmeMix(seed*0x2545F4914F6CDD1D ^ uint64(i))
		r := float64(h>>11) / (1 << 53)
		id := i + 1
		if i > 0 && r < s.UpdateRatio+s.DeleteRatio {
			id = 1 + int64(readmeMix(h)%uint64(i))
			if r < s.DeleteRatio {
				delete(out, id)
				continue
			}
		}
		v := row{seq: i, name: readmeWords[h%12] + "-" + strconv.FormatUint(h>>40, 36),
			amount: float64(h%1000000) / 100, ts: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Millisecond)}
		if s.Nested {
			var tags []string
			for t := uint64(0); t < (h>>12)%3; t++ {
				tags = append(tags, readmeWords[(h>>(16+4*t))%12])
			}
			v.nested = fmt.Sprintf("%s/%d/%s", readmeCities[(h>>8)%8], (h>>20)%100000, strings.Join(tags, ","))
		}
		out[id] = v
	}
	return out
}

// readPlugin runs the datagen binary with settings until its idle checkpoint and folds the events by id.
func readPlugin(t *testing.T, c *client.Client, settings []byte) map[int64]row {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rs, err := c.Read(ctx, settings, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64]row{}
	for {
		m, err := rs.Next()
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		if m.Checkpoint != nil && m.Checkpoint.Idle {
			return out
		}
		if m.Batch == nil {
			continue
		}
		recs, _, err := protocol.DecodeRecords(memory.DefaultAllocator, m.Batch.IPC)
		if err != nil {
			t.Fatal(err)
		}
		for _, rec := range recs {
			foldBatch(t, rec, out)
			rec.Release()
		}
	}
}

func foldBatch(t *testing.T, rec arrow.RecordBatch, out map[int64]row) {
	t.Helper()
	ops, err := change.Ops(rec)
	if err != nil {
		t.Fatal(err)
	}
	col := func(name string) arrow.Array {
		idx := rec.Schema().FieldIndices(name)
		if len(idx) == 0 {
			return nil
		}
		return rec.Column(idx[0])
	}
	ids, seqs := col("id").(*array.Int64), col("seq").(*array.Int64)
	names, amounts, tss := col("name").(*array.String), col("amount").(*array.Float64), col("ts").(*array.Timestamp)
	addr, tags := col("address"), col("tags")
	for i := 0; i < int(rec.NumRows()); i++ {
		id := ids.Value(i)
		if change.Op(ops.Value(i)) == change.OpDelete {
			delete(out, id)
			continue
		}
		v := row{seq: seqs.Value(i), name: names.Value(i), amount: amounts.Value(i), ts: tss.Value(i).ToTime(arrow.Microsecond)}
		if addr != nil {
			st := addr.(*array.Struct)
			l := tags.(*array.List)
			lo, hi := l.ValueOffsets(i)
			var tg []string
			for j := lo; j < hi; j++ {
				tg = append(tg, l.ListValues().(*array.String).Value(int(j)))
			}
			v.nested = fmt.Sprintf("%s/%d/%s", st.Field(0).(*array.String).Value(i), st.Field(1).(*array.Int32).Value(i), strings.Join(tg, ","))
		}
		out[id] = v
	}
}

// readmeExample is one row of the README's table of final states.
var readmeExample = regexp.MustCompile("(?m)^\\| `(\\{.*\\})` \\| ([0-9]+) \\| ([0-9]+) \\| ([0-9.]+) \\|$")

// TestReadmeFinalState runs the datagen binary with each example of its README and compares the final table
// (events folded by id: insert and update replace the row, delete removes it) with the README's rule, row by
// row, and with the figures the README states (rows left, largest id, sum of amount).
func TestReadmeFinalState(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	examples := readmeExample.FindAllStringSubmatch(string(readme), -1)
	if len(examples) < 3 {
		t.Fatalf("README.md has %d examples of final states, want at least 3", len(examples))
	}
	c, err := client.Start(context.Background(), client.Config{Path: conformance.Build(t, ".")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Kill()
	for _, ex := range examples {
		t.Run(ex[1], func(t *testing.T) {
			var s readmeSettings
			if err := json.Unmarshal([]byte(ex[1]), &s); err != nil {
				t.Fatal(err)
			}
			got, want := readPlugin(t, c, []byte(ex[1])), readmeState(s)
			if len(got) != len(want) {
				t.Errorf("plugin left %d rows, the README's rule %d", len(got), len(want))
			}
			var maxID int64
			var sum float64
			for id, w := range want {
				if g, ok := got[id]; !ok || g != w {
					t.Errorf("id %d: plugin %+v (present %v), README's rule %+v", id, g, ok, w)
				}
				maxID = max(maxID, id)
				sum += w.amount
			}
			stated := fmt.Sprintf("%s %s %s", ex[2], ex[3], ex[4])
			if figures := fmt.Sprintf("%d %d %.2f", len(got), maxID, math.Round(sum*100)/100); figures != stated {
				t.Errorf("README states rows, largest id, sum(amount) = %s; the plugin gives %s", stated, figures)
			}
		})
	}
}

// TestReadmeSettings holds the README's settings table to the schema the plugin serves: the same names, and
// the same default wherever the schema states one.
func TestReadmeSettings(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile("gen/settings.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties map[string]struct {
			Default json.RawMessage `json:"default"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(raw, &schema); err != nil {
		t.Fatal(err)
	}
	documented := map[string]string{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| `([^`]*)` \\|").FindAllStringSubmatch(string(readme), -1) {
		documented[m[1]] = m[2]
	}
	for name, p := range schema.Properties {
		def, ok := documented[name]
		if !ok {
			t.Errorf("README's settings table lacks %s", name)
			continue
		}
		if len(p.Default) > 0 && strings.Trim(string(p.Default), `"`) != def {
			t.Errorf("%s: README's default %q, the schema's %s", name, def, p.Default)
		}
	}
	for name := range documented {
		if _, ok := schema.Properties[name]; !ok {
			t.Errorf("README documents %s, which the schema does not have", name)
		}
	}
}
