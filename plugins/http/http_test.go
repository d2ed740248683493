package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/conformance"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
)

func gz(t *testing.T, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// noWait is how long a test watches for something that must not happen.
const noWait = 300 * time.Millisecond

func TestHTTPSource(t *testing.T) {
	bin := conformance.Build(t, ".")

	t.Run("schema evolves before the batches that need it", func(t *testing.T) {
		r := startPlugin(t, bin, nil).read(t, nil)
		steps := []struct {
			body       string
			wantFields string // data fields of the schema change; "" = no schema change
			check      func(t *testing.T, rec arrow.RecordBatch)
		}{
			{`{"id":1,"name":"a"}`, "id,name", func(t *testing.T, rec arrow.RecordBatch) {
				if f, _ := rec.Schema().FieldsByName("id"); f[0].Nullable || f[0].Type.ID() != arrow.INT64 {
					t.Errorf("key column: %s, want a required int64", f[0])
				}
			}},
			{`{"id":2,"name":"b","address":{"city":"Oslo"}}`, "id,name,address", nil},
			{`{"id":3,"address":{"city":"Lima","zip":15001},"tags":["x","y"]}`, "id,name,address,tags", func(t *testing.T, rec arrow.RecordBatch) {
				if got := column(t, rec, "address")[0]; got != `{"city":"Lima","zip":15001}` {
					t.Errorf("address %s", got)
				}
				f, _ := rec.Schema().FieldsByName("address")
				if st := f[0].Type.(*arrow.StructType); fieldNames(st.Fields()) != "city,zip" {
					t.Errorf("nested field not appended: %s", st)
				}
			}},
			{`{"id":4,"name":"c"}`, "", func(t *testing.T, rec arrow.RecordBatch) {
				if got := column(t, rec, "name")[0]; got != "c" {
					t.Errorf("name %s", got)
				}
				if got := column(t, rec, "address")[0]; got != "(null)" {
					t.Errorf("address of a record without it: %s", got)
				}
			}},
			// name is utf8 already: under the string policy a number is stored as its text, no schema change.
			{`{"id":5,"name":7}`, "", func(t *testing.T, rec arrow.RecordBatch) {
				if got := column(t, rec, "name")[0]; got != "7" {
					t.Errorf("int widened into a string column: %s", got)
				}
			}},
		}
		var last uint64
		for i, st := range steps {
			resp := r.postAsync(req{body: []byte(st.body)})
			c := r.nextChange()
			switch {
			case st.wantFields == "" && c.schema != nil:
				t.Fatalf("step %d: unexpected schema change %s", i, c.schema)
			case st.wantFields != "" && c.schema == nil:
				t.Fatalf("step %d: no schema change before the batch", i)
			case c.schema != nil && fieldNames(change.DataFields(c.schema)) != st.wantFields:
				t.Fatalf("step %d: schema fields %s, want %s", i, fieldNames(change.DataFields(c.schema)), st.wantFields)
			}
			if len(c.batches) != 1 || c.batches[0].NumRows() != 1 {
				t.Fatalf("step %d: want one batch of one row, got %d batches", i, len(c.batches))
			}
			rec := c.batches[0]
			if got := column(t, rec, change.PosColumn)[0]; !strings.HasSuffix(got, ":0") {
				t.Errorf("step %d: position %q", i, got)
			}
			if ops, err := change.Ops(rec); err != nil || ops.Value(0) != int8(change.OpUpdate) {
				t.Errorf("step %d: op %v %v", i, ops, err)
			}
			if st.check != nil {
				st.check(t, rec)
			}
			seq := seqOf(t, c.checkpoint.Position)
			if seq <= last {
				t.Fatalf("step %d: checkpoint %s does not advance past %d", i, c.checkpoint.Position, last)
			}
			last = seq
			if !c.checkpoint.Idle {
				t.Errorf("step %d: the checkpoint of the only request in flight should be idle", i)
			}
			r.ack(c.checkpoint)
			if res := waitResponse(t, resp, 10*time.Second); res.status != http.StatusOK || res.body["records"] != 1.0 {
				t.Fatalf("step %d: %d %s", i, res.status, res.raw)
			}
		}
	})

	t.Run("response waits for the ack", func(t *testing.T) {
		r := startPlugin(t, bin, nil).read(t, nil)
		first := r.postAsync(req{body: []byte(`{"id":1}`)})
		c1 := r.nextChange()
		second := r.postAsync(req{body: []byte(`[{"id":2},{"id":3}]`)})
		c2 := r.nextChange()
		select {
		case res := <-first:
			t.Fatalf("answered before the ack: %d %s", res.status, res.raw)
		case res := <-second:
			t.Fatalf("answered before the ack: %d %s", res.status, res.raw)
		case <-time.After(noWait):
		}
		if seqOf(t, c2.checkpoint.Position) <= seqOf(t, c1.checkpoint.Position) {
			t.Fatalf("checkpoints %s then %s", c1.checkpoint.Position, c2.checkpoint.Position)
		}
		// One ack at the later checkpoint covers both requests.
		r.ack(c2.checkpoint)
		for _, ch := range []<-chan response{first, second} {
			if res := waitResponse(t, ch, 10*time.Second); res.status != http.StatusOK {
				t.Fatalf("after the ack: %d %s", res.status, res.raw)
			}
		}
	})

	t.Run("json array, ndjson, gzip and deletes", func(t *testing.T) {
		r := startPlugin(t, bin, nil).read(t, nil)
		for _, tc := range []struct {
			name  string
			q     req
			ids   string
			ops   []change.Op
			names string
		}{
			{"json array", req{body: []byte(`[{"id":1,"name":"a"},{"id":2,"name":"b"}]`)}, "[1 2]", []change.Op{change.OpUpdate, change.OpUpdate}, `[a b]`},
			{"ndjson", req{ctype: "application/x-ndjson", body: []byte("{\"id\":3,\"name\":\"c\"}\n\n{\"id\":1,\"name\":\"a2\",\"_op\":\"upsert\"}\r\n")}, "[3 1]", []change.Op{change.OpUpdate, change.OpUpdate}, `[c a2]`},
			{"gzip ndjson with a delete", req{ctype: "application/x-ndjson; charset=utf-8", headers: map[string]string{"Content-Encoding": "gzip"},
				body: gz(t, []byte("{\"id\":4,\"name\":\"d\"}\n{\"id\":2,\"_op\":\"delete\",\"name\":\"ignored\"}\n"))}, "[4 2]", []change.Op{change.OpUpdate, change.OpDelete}, `[d (null)]`},
			{"gzip json", req{headers: map[string]string{"Content-Encoding": "gzip"}, body: gz(t, []byte(`{"id":5,"name":"e"}`))}, "[5]", []change.Op{change.OpUpdate}, `[e]`},
		} {
			t.Run(tc.name, func(t *testing.T) {
				c, res := r.roundTrip(tc.q)
				if res.status != http.StatusOK {
					t.Fatalf("%d %s", res.status, res.raw)
				}
				if len(c.batches) != 1 {
					t.Fatalf("%d batches", len(c.batches))
				}
				rec := c.batches[0]
				if got := fmt.Sprint(column(t, rec, "id")); got != tc.ids {
					t.Errorf("ids %s, want %s", got, tc.ids)
				}
				if got := fmt.Sprint(column(t, rec, "name")); got != tc.names {
					t.Errorf("names %s, want %s", got, tc.names)
				}
				ops, err := change.Ops(rec)
				if err != nil {
					t.Fatal(err)
				}
				for i, op := range tc.ops {
					if change.Op(ops.Value(i)) != op {
						t.Errorf("row %d: op %s, want %s", i, change.Op(ops.Value(i)), op)
					}
				}
				if idx := rec.Schema().FieldIndices("_op"); len(idx) != 0 {
					t.Errorf("_op became a column")
				}
			})
		}
	})

	t.Run("max_batch_rows splits a request under one checkpoint", func(t *testing.T) {
		r := startPlugin(t, bin, map[string]any{"max_batch_rows": 10}).read(t, nil)
		var recs []string
		for i := range 25 {
			recs = append(recs, fmt.Sprintf(`{"id":%d}`, i))
		}
		resp := r.postAsync(req{body: []byte("[" + strings.Join(recs, ",") + "]")})
		c := r.nextChange()
		if len(c.batches) != 3 || c.batches[0].NumRows() != 10 || c.batches[2].NumRows() != 5 {
			t.Fatalf("got %d batches", len(c.batches))
		}
		if got := column(t, c.batches[2], change.PosColumn)[4]; !strings.HasSuffix(got, ":24") {
			t.Errorf("last position %s", got)
		}
		r.ack(c.checkpoint)
		if res := waitResponse(t, resp, 10*time.Second); res.status != http.StatusOK || res.body["records"] != 25.0 {
			t.Fatalf("%d %s", res.status, res.raw)
		}
	})

	t.Run("bad input is refused and emits nothing", func(t *testing.T) {
		p := startPlugin(t, bin, map[string]any{
			"bearer_token":  "s3cret",
			"body_limit":    1024,
			"type_conflict": "reject",
			"streams": map[string]any{
				"events": map[string]any{"primary_key": "/id"},
				"logs":   map[string]any{},
			},
		})
		r := p.read(t, nil)
		auth := map[string]string{"Authorization": "Bearer s3cret"}
		with := func(h map[string]string) map[string]string {
			out := map[string]string{"Authorization": "Bearer s3cret"}
			for k, v := range h {
				out[k] = v
			}
			return out
		}
		// A first record fixes the schema: id int64, n int64, tags list<utf8>.
		resp := r.postAsync(req{body: []byte(`{"id":1,"n":1,"tags":["a"]}`), headers: auth})
		r.ack(r.nextChange().checkpoint)
		if res := waitResponse(t, resp, 10*time.Second); res.status != http.StatusOK {
			t.Fatalf("%d %s", res.status, res.raw)
		}
		big := []byte(`{"id":2,"s":"` + strings.Repeat("x", 2000) + `"}`)
		for _, tc := range []struct {
			name   string
			q      req
			status int
			record any // float64 index or nil
			field  string
			line   any
		}{
			{"no token", req{body: []byte(`{"id":2}`)}, 401, nil, "", nil},
			{"wrong token", req{body: []byte(`{"id":2}`), headers: map[string]string{"Authorization": "Bearer nope"}}, 401, nil, "", nil},
			{"unknown stream", req{path: "/v1/streams/nope", body: []byte(`{"id":2}`), headers: auth}, 404, nil, "", nil},
			{"wrong content type", req{ctype: "text/plain", body: []byte(`{"id":2}`), headers: auth}, 415, nil, "", nil},
			{"unknown encoding", req{body: []byte(`{"id":2}`), headers: with(map[string]string{"Content-Encoding": "br"})}, 415, nil, "", nil},
			{"body over the limit", req{body: big, headers: auth}, 413, nil, "", nil},
			{"gzip body over the limit once decoded", req{body: gz(t, big), headers: with(map[string]string{"Content-Encoding": "gzip"})}, 413, nil, "", nil},
			{"not gzip", req{body: []byte(`{"id":2}`), headers: with(map[string]string{"Content-Encoding": "gzip"})}, 400, nil, "", nil},
			{"malformed json", req{body: []byte("[{\"id\":2},\n{\"id\":3,}]"), headers: auth}, 400, nil, "", 2.0},
			{"malformed ndjson names the line", req{ctype: "application/x-ndjson", body: []byte("{\"id\":2}\n{\"id\":3}\n{\"id\":4\n"), headers: auth}, 400, 2.0, "", 3.0},
			{"not an object", req{body: []byte(`[{"id":2},3]`), headers: auth}, 400, 1.0, "", nil},
			{"missing key", req{body: []byte(`[{"id":2},{"n":3}]`), headers: auth}, 422, 1.0, "/id", nil},
			{"bad op", req{body: []byte(`{"id":2,"_op":"truncate"}`), headers: auth}, 422, 0.0, "/_op", nil},
			{"delete without a key", req{path: "/v1/streams/logs", body: []byte(`{"a":1,"_op":"delete"}`), headers: auth}, 422, 0.0, "/_op", nil},
			{"reserved name", req{body: []byte(`{"id":2,"_skippr_op":1}`), headers: auth}, 422, 0.0, "/_skippr_op", nil},
			{"type conflict", req{body: []byte(`[{"id":2,"n":2},{"id":3,"n":3},{"id":4,"n":"four"}]`), headers: auth}, 422, 2.0, "/n", nil},
			{"nested conflict", req{body: []byte(`{"id":2,"tags":["b",{"c":1}]}`), headers: auth}, 422, 0.0, "/tags/1", nil},
		} {
			t.Run(tc.name, func(t *testing.T) {
				res := r.post(tc.q)
				if res.status != tc.status {
					t.Fatalf("status %d, want %d: %s", res.status, tc.status, res.raw)
				}
				if msg, _ := res.body["error"].(string); msg == "" {
					t.Errorf("no error message: %s", res.raw)
				}
				if res.body["record"] != tc.record || (tc.field != "" && res.body["field"] != tc.field) || res.body["line"] != tc.line {
					t.Errorf("got record %v field %v line %v, want %v %q %v: %s", res.body["record"], res.body["field"], res.body["line"], tc.record, tc.field, tc.line, res.raw)
				}
				r.expectNone(50*time.Millisecond, tc.name)
			})
		}
		if status := get(t, r.base+"/v1/streams/events"); status != http.StatusMethodNotAllowed {
			t.Errorf("GET on a stream: %d, want 405", status)
		}
		if status := get(t, r.base+"/v2/other"); status != http.StatusNotFound {
			t.Errorf("unknown endpoint: %d, want 404", status)
		}
		r.expectNone(noWait, "after the bad requests")
		// The next good request is the next thing in the log.
		resp = r.postAsync(req{body: []byte(`{"id":9,"n":9}`), headers: auth})
		c := r.nextChange()
		if c.schema != nil || len(c.batches) != 1 || column(t, c.batches[0], "id")[0] != "9" {
			t.Fatalf("the first emission after bad requests is not the good request's")
		}
		r.ack(c.checkpoint)
		if res := waitResponse(t, resp, 10*time.Second); res.status != http.StatusOK {
			t.Fatalf("%d %s", res.status, res.raw)
		}
	})

	t.Run("idempotent retry", func(t *testing.T) {
		r := startPlugin(t, bin, nil).read(t, nil)
		key := map[string]string{"Idempotency-Key": "order-42"}
		body := []byte(`{"id":42}`)
		resp := r.postAsync(req{body: body, headers: key})
		r.ack(r.nextChange().checkpoint)
		first := waitResponse(t, resp, 10*time.Second)
		if first.status != http.StatusOK {
			t.Fatalf("%d %s", first.status, first.raw)
		}
		again := r.post(req{body: body, headers: key})
		if again.status != http.StatusOK || again.raw != first.raw || again.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("retry: %d %s (replayed %q)", again.status, again.raw, again.header.Get("Idempotent-Replayed"))
		}
		if other := r.post(req{body: []byte(`{"id":43}`), headers: key}); other.status != http.StatusUnprocessableEntity {
			t.Fatalf("same key, other body: %d %s", other.status, other.raw)
		}
		r.expectNone(noWait, "a replayed request")
	})

	t.Run("retry while in flight waits for the first", func(t *testing.T) {
		r := startPlugin(t, bin, map[string]any{"ack_timeout": "500ms"}).read(t, nil)
		key := map[string]string{"Idempotency-Key": "k1"}
		body := []byte(`{"id":1}`)
		start := time.Now()
		first := r.postAsync(req{body: body, headers: key})
		c := r.nextChange()
		// No ack within ack_timeout: 503, the client may retry.
		if res := waitResponse(t, first, 10*time.Second); res.status != http.StatusServiceUnavailable || res.header.Get("Retry-After") == "" {
			t.Fatalf("no ack: %d %s", res.status, res.raw)
		}
		if d := time.Since(start); d < 400*time.Millisecond {
			t.Fatalf("503 after %s, before ack_timeout", d)
		}
		retry := r.postAsync(req{body: body, headers: key})
		r.expectNone(150*time.Millisecond, "a retry of a request in flight")
		r.ack(c.checkpoint)
		if res := waitResponse(t, retry, 10*time.Second); res.status != http.StatusOK || res.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("retry after the ack: %d %s", res.status, res.raw)
		}
		r.expectNone(noWait, "after the retry")
	})

	t.Run("a Read that ends fails its pending requests with 503", func(t *testing.T) {
		p := startPlugin(t, bin, nil)
		r := p.read(t, nil)
		if res := get(t, r.base+"/healthz"); res != http.StatusOK {
			t.Fatalf("healthz while reading: %d", res)
		}
		pending := r.postAsync(req{body: []byte(`{"id":1}`)})
		r.nextChange()
		r.stop()
		if res := waitResponse(t, pending, 10*time.Second); res.status != http.StatusServiceUnavailable {
			t.Fatalf("pending request after the Read ended: %d %s", res.status, res.raw)
		}
		if res := r.post(req{body: []byte(`{"id":2}`)}); res.status != http.StatusServiceUnavailable {
			t.Fatalf("post with no Read: %d %s", res.status, res.raw)
		}
		if res := get(t, r.base+"/healthz"); res != http.StatusServiceUnavailable {
			t.Fatalf("healthz with no Read: %d", res)
		}
		// A new Read serves on the same address again.
		r2 := p.read(t, nil)
		if r2.base != r.base {
			t.Fatalf("address moved from %s to %s", r.base, r2.base)
		}
		resp := r2.postAsync(req{body: []byte(`{"id":3}`)})
		r2.ack(r2.nextChange().checkpoint)
		if res := waitResponse(t, resp, 10*time.Second); res.status != http.StatusOK {
			t.Fatalf("%d %s", res.status, res.raw)
		}
	})

	t.Run("read from a checkpoint restores the schema across a restart", func(t *testing.T) {
		p := startPlugin(t, bin, nil)
		r := p.read(t, nil)
		resp := r.postAsync(req{body: []byte(`{"id":1,"v":1,"o":{"a":true}}`)})
		c := r.nextChange()
		r.ack(c.checkpoint)
		if res := waitResponse(t, resp, 10*time.Second); res.status != http.StatusOK {
			t.Fatalf("%d %s", res.status, res.raw)
		}
		cp := c.checkpoint.Position
		r.stop()
		p.c.Kill()

		// A new process reading from the checkpoint knows the schema the log holds.
		p2 := &plugin{c: startProcess(t, bin), settings: p.settings, addrFile: p.addrFile}
		r2 := p2.read(t, cp)
		seq0 := seqOf(t, cp)
		if seq1 := seqOf(t, r2.initial.Position); seq1 < seq0 {
			t.Fatalf("read from checkpoint %d starts at %d", seq0, seq1)
		}
		// Replay from an older checkpoint yields nothing: a push source holds no data.
		r2.expectNone(noWait, "read from a checkpoint")
		resp = r2.postAsync(req{body: []byte(`{"id":2,"v":2,"o":{"a":false}}`)})
		c2 := r2.nextChange()
		if c2.schema != nil {
			t.Fatalf("schema change although the checkpoint's schema holds the record: %s", c2.schema)
		}
		if !c2.batches[0].Schema().Equal(c.batches[0].Schema()) {
			t.Fatalf("restored schema %s differs from %s", c2.batches[0].Schema(), c.batches[0].Schema())
		}
		if seq2 := seqOf(t, c2.checkpoint.Position); seq2 <= seq0 {
			t.Fatalf("checkpoint %d after a read from %d", seq2, seq0)
		}
		r2.ack(c2.checkpoint)
		waitResponse(t, resp, 10*time.Second)
		// Widening continues from the restored schema: v int64 + float → float64, and o keeps its field.
		resp = r2.postAsync(req{body: []byte(`{"id":3,"v":2.5,"o":{"b":1}}`)})
		c3 := r2.nextChange()
		if c3.schema == nil {
			t.Fatal("no schema change for a widening")
		}
		v, _ := c3.schema.FieldsByName("v")
		o, _ := c3.schema.FieldsByName("o")
		if v[0].Type.ID() != arrow.FLOAT64 || fieldNames(o[0].Type.(*arrow.StructType).Fields()) != "a,b" {
			t.Fatalf("evolved schema %s", c3.schema)
		}
		r2.ack(c3.checkpoint)
		waitResponse(t, resp, 10*time.Second)
	})

	t.Run("concurrent requests", func(t *testing.T) {
		r := startPlugin(t, bin, nil).read(t, nil)
		msgs := r.autoAck()
		const n = 16
		var wg sync.WaitGroup
		errs := make(chan string, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := doPost(r.base, req{body: []byte(fmt.Sprintf(`[{"id":%d,"f%d":1},{"id":%d}]`, i, i%4, i+100))})
				if err != nil || res.status != http.StatusOK {
					errs <- fmt.Sprintf("request %d: %v %d %s", i, err, res.status, res.raw)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for e := range errs {
			t.Error(e)
		}
		rows, batches := int64(0), 0
		deadline := time.After(10 * time.Second)
		for rows < 2*n {
			select {
			case m := <-msgs:
				if m.Batch != nil {
					rows += m.Batch.Rows
					batches++
				}
			case <-deadline:
				t.Fatalf("read %d rows, want %d", rows, 2*n)
			}
		}
		if batches != n {
			t.Errorf("%d batches for %d requests", batches, n)
		}
	})

	t.Run("discover", func(t *testing.T) {
		dir := t.TempDir()
		sample := filepath.Join(dir, "sample.ndjson")
		if err := os.WriteFile(sample, []byte("{\"id\":\"a\",\"n\":1}\n{\"id\":\"b\",\"n\":1.5,\"at\":\"2026-01-02T03:04:05Z\"}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		p := startPlugin(t, bin, map[string]any{"streams": map[string]any{
			"events":  map[string]any{"primary_key": []string{"/tenant", "/id"}},
			"sampled": map[string]any{"primary_key": "/id", "sample_file": sample},
			"logs":    map[string]any{},
		}})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		streams, err := p.c.Discover(ctx, p.settings)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"events": "tenant,id", "logs": "", "sampled": "id,n,at"}
		if len(streams) != len(want) {
			t.Fatalf("%d streams", len(streams))
		}
		for _, st := range streams {
			sc, err := protocol.DecodeSchema(memory.DefaultAllocator, st.ArrowSchema)
			if err != nil {
				t.Fatal(err)
			}
			if got := fieldNames(change.DataFields(sc)); got != want[st.Name] {
				t.Errorf("stream %s: fields %s, want %s", st.Name, got, want[st.Name])
			}
			if st.Name == "sampled" {
				if f, _ := sc.FieldsByName("n"); f[0].Type.ID() != arrow.FLOAT64 {
					t.Errorf("sampled n: %s", f[0].Type)
				}
				if f, _ := sc.FieldsByName("id"); f[0].Type.ID() != arrow.STRING || f[0].Nullable {
					t.Errorf("sampled id: %s", f[0])
				}
			}
		}
		bad, _ := json.Marshal(map[string]any{"streams": map[string]any{"x": map[string]any{"sample_file": filepath.Join(dir, "missing.json")}}})
		if err := p.c.Check(ctx, bad); err == nil || !strings.Contains(err.Error(), "missing.json") {
			t.Errorf("check with a missing sample file: %v", err)
		}
	})
}

func get(t *testing.T, url string) int {
	t.Helper()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
