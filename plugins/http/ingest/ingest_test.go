package ingest

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/conformance"
)

func TestDecodeRecords(t *testing.T) {
	for _, tc := range []struct {
		name    string
		body    string
		f       format
		n       int
		errLine int
		errRec  int // -1: none
		errHas  string
	}{
		{name: "object", body: `{"a":1}`, n: 1, errRec: -1},
		{name: "array", body: ` [{"a":1},{"b":2}] `, n: 2, errRec: -1},
		{name: "empty array", body: `[]`, n: 0, errRec: -1},
		{name: "empty body", body: ``, errRec: -1, errHas: "empty body"},
		{name: "scalar", body: `3`, errRec: -1, errHas: "a number"},
		{name: "array of scalars", body: `[{"a":1},"x"]`, errRec: 1, errHas: "record 1 is a string"},
		{name: "syntax error line", body: "[\n{\"a\":1},\n{\"a\":}\n]", errLine: 3, errRec: -1, errHas: "malformed JSON"},
		{name: "truncated", body: "[\n{\"a\":1}", errLine: 2, errRec: -1, errHas: "malformed JSON"},
		{name: "two objects", body: "{\"a\":1}\n{\"a\":2}", errLine: 2, errRec: -1, errHas: "x-ndjson"},
		{name: "ndjson", body: "{\"a\":1}\n\n  \n{\"a\":2}\r\n{\"a\":3}", f: formatNDJSON, n: 3, errRec: -1},
		{name: "ndjson empty", body: "\n\n", f: formatNDJSON, n: 0, errRec: -1},
		{name: "ndjson bad line", body: "{\"a\":1}\n\n{\"a\":1,}\n", f: formatNDJSON, errLine: 3, errRec: 1, errHas: "line 3"},
		{name: "ndjson not an object", body: "{\"a\":1}\n[1]\n", f: formatNDJSON, errLine: 2, errRec: 1, errHas: "line 2 is an array"},
		{name: "ndjson two values on a line", body: "{\"a\":1} {\"a\":2}\n", f: formatNDJSON, errLine: 1, errRec: 0, errHas: "unexpected data"},
		{name: "ndjson object over lines", body: "{\"a\":\n1}\n", f: formatNDJSON, errLine: 1, errRec: 0, errHas: "line 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			recs, err := decodeRecords([]byte(tc.body), tc.f)
			if tc.errHas == "" {
				if err != nil {
					t.Fatal(err)
				}
				if len(recs) != tc.n {
					t.Fatalf("%d records, want %d", len(recs), tc.n)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want one containing %q", tc.errHas)
			}
			rec := -1
			if err.Record != nil {
				rec = *err.Record
			}
			if err.Status != http.StatusBadRequest || !strings.Contains(err.Msg, tc.errHas) || err.Line != tc.errLine || rec != tc.errRec {
				t.Fatalf("got %d %q line %d record %d; want 400 containing %q line %d record %d", err.Status, err.Msg, err.Line, rec, tc.errHas, tc.errLine, tc.errRec)
			}
		})
	}
}

func TestNumbersStayExact(t *testing.T) {
	recs, err := decodeRecords([]byte(`{"i":9007199254740993,"f":0.1}`), formatJSON)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(recs[0]["i"]); got != "9007199254740993" {
		t.Fatalf("integer decoded as %s", got)
	}
}

func TestToRows(t *testing.T) {
	for _, tc := range []struct {
		name   string
		body   string
		keys   []string
		ops    []change.Op
		values string // JSON of the row values
		field  string // error field; "" = no error
		record int
	}{
		{name: "upserts", body: `[{"id":1,"a":2},{"id":2,"_op":"upsert"},{"id":3,"_op":"insert"},{"id":4,"_op":null}]`, keys: []string{"id"},
			ops: []change.Op{change.OpUpdate, change.OpUpdate, change.OpUpdate, change.OpUpdate}, values: `[{"a":2,"id":1},{"id":2},{"id":3},{"id":4}]`},
		{name: "delete keeps only the key", body: `{"t":"x","id":1,"a":2,"_op":"delete"}`, keys: []string{"t", "id"},
			ops: []change.Op{change.OpDelete}, values: `[{"id":1,"t":"x"}]`},
		{name: "no key configured", body: `{"a":1}`, ops: []change.Op{change.OpInsert}, values: `[{"a":1}]`},
		{name: "unknown op", body: `[{"id":1},{"id":2,"_op":"merge"}]`, keys: []string{"id"}, field: "/_op", record: 1},
		{name: "op not a string", body: `{"id":2,"_op":3}`, keys: []string{"id"}, field: "/_op"},
		{name: "delete without key setting", body: `{"a":1,"_op":"delete"}`, field: "/_op"},
		{name: "missing key", body: `{"a":1}`, keys: []string{"id"}, field: "/id"},
		{name: "null key", body: `{"id":null}`, keys: []string{"id"}, field: "/id"},
		{name: "object key", body: `{"id":{"x":1}}`, keys: []string{"id"}, field: "/id"},
		{name: "escaped key name", body: `{"a/b":[1]}`, keys: []string{"a/b"}, field: "/a~1b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			recs, derr := decodeRecords([]byte(tc.body), formatJSON)
			if derr != nil {
				t.Fatal(derr)
			}
			rows, err := toRows(recs, tc.keys)
			if tc.field != "" {
				if err == nil || err.Status != http.StatusUnprocessableEntity || err.Field != tc.field || err.Record == nil || *err.Record != tc.record {
					t.Fatalf("got %+v, want a 422 at record %d %s", err, tc.record, tc.field)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var values []map[string]any
			for i, r := range rows {
				if r.op != tc.ops[i] {
					t.Errorf("row %d: op %s, want %s", i, r.op, tc.ops[i])
				}
				values = append(values, r.value)
			}
			if b, _ := json.Marshal(values); string(b) != tc.values {
				t.Errorf("values %s, want %s", b, tc.values)
			}
		})
	}
}

func TestParseSettings(t *testing.T) {
	for _, tc := range []struct {
		in      string
		wantErr string
		check   func(t *testing.T, s *settings)
	}{
		{in: `{"streams":{"e":{}}}`, check: func(t *testing.T, s *settings) {
			if s.Listen != "127.0.0.1:8080" || s.BodyLimit != 10<<20 || s.idempotencyWindow != 10*time.Minute || s.TypeConflict != "string" || s.MaxBatchRows != 10000 {
				t.Errorf("defaults: %+v", s)
			}
		}},
		{in: `{"streams":{"e":{"primary_key":"/id"},"f":{"primary_key":["/a~1b","/c~0d"]}}, "idempotency_window":"1h", "ack_timeout":"2s"}`, check: func(t *testing.T, s *settings) {
			if fmt.Sprint(s.Streams["e"].keys) != "[id]" || fmt.Sprint(s.Streams["f"].keys) != "[a/b c~d]" || s.ackTimeout != 2*time.Second {
				t.Errorf("keys %v %v", s.Streams["e"].keys, s.Streams["f"].keys)
			}
		}},
		{in: `{}`, wantErr: "at least one stream"},
		{in: `{"streams":{}}`, wantErr: "at least one stream"},
		{in: `{"streams":{"e":{}},"lisen":"x"}`, wantErr: "lisen"},
		{in: `{"streams":{"e f":{}}}`, wantErr: "stream name"},
		{in: `{"streams":{"e":{"primary_key":"id"}}}`, wantErr: "not a JSON pointer"},
		{in: `{"streams":{"e":{"primary_key":"/a/b"}}}`, wantErr: "top-level"},
		{in: `{"streams":{"e":{"primary_key":["/a","/a"]}}}`, wantErr: "twice"},
		{in: `{"streams":{"e":{"primary_key":"/_op"}}}`, wantErr: "reserved"},
		{in: `{"streams":{"e":{"primary_key":3}}}`, wantErr: "primary_key"},
		{in: `{"streams":{"e":{}},"listen":"8080"}`, wantErr: "host:port"},
		{in: `{"streams":{"e":{}},"body_limit":0}`, wantErr: "body_limit"},
		{in: `{"streams":{"e":{}},"ack_timeout":"soon"}`, wantErr: "ack_timeout"},
		{in: `{"streams":{"e":{}},"idempotency_window":"-1s"}`, wantErr: "idempotency_window"},
		{in: `{"streams":{"e":{}},"type_conflict":"drop"}`, wantErr: "type_conflict"},
		{in: `{"streams":{"e":{}},"max_batch_rows":-1}`, wantErr: "max_batch_rows"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			s, err := parseSettings([]byte(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, s)
		})
	}
}

// The embedded JSON Schema must accept what parseSettings accepts and refuse what it refuses (for the
// cases a schema can express).
func TestSettingsSchemaAgrees(t *testing.T) {
	sch, err := conformance.CompileSchema(settingsSchema)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{`{"streams":{"e":{"primary_key":"/id","sample_file":"/x.json"}},"listen":"127.0.0.1:0","bearer_token":"t","type_conflict":"reject"}`, true},
		{`{"streams":{"e":{"primary_key":["/a","/b"]}},"idempotency_window":"5m","ack_timeout":"1s","max_batch_rows":5,"body_limit":100,"address_file":"/tmp/a"}`, true},
		{`{"streams":{}}`, false},
		{`{"streams":{"e f":{}}}`, false},
		{`{"streams":{"e":{"primary_key":"/a/b"}}}`, false},
		{`{"streams":{"e":{}},"type_conflict":"drop"}`, false},
		{`{"streams":{"e":{}},"extra":1}`, false},
	} {
		var v any
		if err := json.Unmarshal([]byte(tc.in), &v); err != nil {
			t.Fatal(err)
		}
		schemaOK := sch.Validate(v) == nil
		_, perr := parseSettings([]byte(tc.in))
		if schemaOK != tc.ok || (perr == nil) != tc.ok {
			t.Errorf("%s: schema accepts %v, parseSettings error %v; want accepted %v", tc.in, schemaOK, perr, tc.ok)
		}
	}
}

func TestIdempotencyStore(t *testing.T) {
	var s idemStore
	now := time.Now()
	k := idemKey{stream: "e", key: "k"}
	fp, other := sha256.Sum256([]byte("a")), sha256.Sum256([]byte("b"))

	e, res := s.claim(k, fp, now)
	if res != claimed {
		t.Fatalf("first claim: %v", res)
	}
	if _, res := s.claim(k, fp, now); res != inFlight {
		t.Fatalf("claim while in flight: %v", res)
	}
	if _, res := s.claim(k, other, now); res != mismatch {
		t.Fatalf("claim with another body: %v", res)
	}
	if _, res := s.claim(idemKey{stream: "f", key: "k"}, fp, now); res != claimed {
		t.Fatalf("same key on another stream: %v", res)
	}
	// A failed request forgets the key; a waiter is woken and the next claim owns it.
	s.release(e)
	<-e.done
	e, res = s.claim(k, fp, now)
	if res != claimed {
		t.Fatalf("claim after release: %v", res)
	}
	s.complete(e, []byte("ok"), time.Minute, now)
	<-e.done
	if got, res := s.claim(k, fp, now.Add(59*time.Second)); res != replay || string(got.resp) != "ok" {
		t.Fatalf("claim within the window: %v", res)
	}
	if _, res := s.claim(k, fp, now.Add(time.Minute)); res != claimed {
		t.Fatalf("claim after the window: %v", res)
	}
	if len(s.expiring) != 0 {
		t.Errorf("expired entries not swept: %d", len(s.expiring))
	}
}

func TestCheckpoint(t *testing.T) {
	cp := checkpoint{Seq: 7, Schemas: map[string][]byte{"e": {1, 2}}}
	back, err := parseCheckpoint(cp.encode())
	if err != nil || back.Seq != 7 || string(back.Schemas["e"]) != "\x01\x02" {
		t.Fatalf("round trip: %+v %v", back, err)
	}
	if c, err := parseCheckpoint(nil); err != nil || c.Seq != 0 {
		t.Fatalf("empty checkpoint: %+v %v", c, err)
	}
	for _, bad := range []string{"12", `{"seq":"x"}`, `{"seq":1,"lsn":2}`, "{"} {
		if _, err := parseCheckpoint([]byte(bad)); err == nil || !strings.Contains(err.Error(), "not an http source checkpoint") {
			t.Errorf("%s: %v", bad, err)
		}
	}
}
