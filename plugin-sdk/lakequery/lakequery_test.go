package lakequery

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"testing"
)

func TestStreamRoundTrip(t *testing.T) {
	req := Request{SQL: "SELECT 1", Format: FormatCSV, Lakes: []Lake{{Pipeline: "p", Plan: Plan{Namespace: "lake",
		Tables: []TablePlan{{Stream: "s", Name: "lake.s", Exists: true, Fence: 3, Key: []string{"id"},
			Files: []PlanFile{{Path: "/a.parquet", Location: "file:///a.parquet", Rows: 2, EqualityDeletes: []EqDeletion{{Path: "/d.parquet", FieldIDs: []int{1}}}}}}}}}}}
	var buf bytes.Buffer
	w, err := NewWriter(&buf, req)
	if err != nil {
		t.Fatal(err)
	}
	want := []Entry{
		{Pipeline: "p", Seq: 4, Batches: []Batch{{Stream: "s", IPC: []byte("one")}, {Stream: "t", IPC: []byte("two")}}},
		{Pipeline: "p", Seq: 5},
		{Pipeline: "q", Seq: 1, Batches: []Batch{{Stream: "s", IPC: bytes.Repeat([]byte("x"), 5<<20)}}},
	}
	for _, e := range want {
		if err := w.Entry(e.Pipeline, e.Seq); err != nil {
			t.Fatal(err)
		}
		if e.Seq == 4 {
			if err := w.Schema("s", []byte("schema")); err != nil {
				t.Fatal(err)
			}
		}
		for _, b := range e.Batches {
			if err := w.Batch(b.Stream, 1, b.IPC); err != nil {
				t.Fatal(err)
			}
		}
	}
	r, got, err := NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, req) {
		t.Fatalf("request %+v, want %+v", got, req)
	}
	for i, e := range want {
		g, err := r.Next()
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		if !reflect.DeepEqual(g, e) {
			t.Fatalf("entry %d: %+v, want %+v", i, g.Seq, e.Seq)
		}
	}
	if _, err := r.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last entry: %v, want EOF", err)
	}
}

func TestStreamMustStartWithHeader(t *testing.T) {
	var buf bytes.Buffer
	w, _ := NewWriter(&buf, Request{SQL: "x"})
	w.Batch("s", 1, []byte("orphan"))
	r, _, err := NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Next(); err == nil {
		t.Fatal("a batch before any header was accepted")
	}
}
