package infer

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
)

// fuzzSeeds run as an ordinary test (go test) and seed `go test -fuzz FuzzInferBuild`.
var fuzzSeeds = []string{
	`{"a":1,"b":"x","c":true,"d":null,"e":1.5}`,
	`{"a":1}` + "\n" + `{"a":2.5}` + "\n" + `{"a":"x"}`,
	`[{"a":{"b":[1,2,{"c":null}]}},{"a":{"b":[]}}]`,
	`{"t":"2026-01-02T03:04:05.123456Z"}` + "\n" + `{"t":"2026-01-02T03:04:05.1234567Z"}`,
	`{"n":9007199254740993}` + "\n" + `{"n":0.5}`,
	`{"n":123456789012345678901234567890,"m":-1e400,"z":-0}`,
	`{"l":[[1],["a"],[{"x":1}]]}`,
	`{"o":{}}` + "\n" + `{"o":{"p":{}}}` + "\n" + `{"o":[]}`,
	`{"a/b":{"c~d":[true,false]}}`,
	`{"":1,"é":"ü","\u0000":"\u2028"}`,
	`{"_skippr_op":1}`,
	`{"x":"2026-01-02T03:04:05+02:00"}` + "\n" + `{"x":{"y":"2026-01-02T03:04:05Z"}}`,
	`{"deep":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}`,
}

func FuzzInferBuild(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, data []byte, reject bool) {
		recs := decodeFuzz(data)
		if recs == nil {
			return
		}
		opt := Options{}
		if reject {
			opt.Conflict = Reject
		}
		fs, err := Infer(recs, opt)
		if err != nil {
			var ie *Error
			if !errors.As(err, &ie) || ie.Record < 0 || ie.Record >= len(recs) || !strings.HasPrefix(ie.Path, "/") {
				t.Fatalf("Infer error %v does not name a record of %d and a field", err, len(recs))
			}
			if !reject && !strings.Contains(ie.Reason, "reserved") && !strings.Contains(ie.Reason, "nest deeper") {
				t.Fatalf("under widen-to-string only reserved names and depth may fail, got %v", err)
			}
			return
		}
		// Every field of every record is in the schema.
		for i, r := range recs {
			if p := missingPath(fs, r, ""); p != "" {
				t.Fatalf("record %d: field %s is not in the schema %s", i, p, sig(fs))
			}
		}
		// Evolving in two steps gives the same schema as inferring at once, and the schema already holds
		// every record.
		half := len(recs) / 2
		first, err := Infer(recs[:half], opt)
		if err != nil {
			t.Fatalf("infer the first %d of %d records: %v", half, len(recs), err)
		}
		stepped, _, err := Evolve(first, recs[half:], opt)
		if err != nil {
			t.Fatalf("evolve by the other records: %v", err)
		}
		if !sameFields(stepped, fs) {
			t.Fatalf("stepwise %s\nat once   %s", sig(stepped), sig(fs))
		}
		// The schema survives Arrow IPC (metadata included) and still holds every record.
		mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
		defer mem.AssertSize(t, 0)
		schema := change.Schema(fs, nil)
		sb, err := protocol.EncodeSchema(mem, schema)
		if err != nil {
			t.Fatalf("encode schema %s: %v", sig(fs), err)
		}
		back, err := protocol.DecodeSchema(mem, sb)
		if err != nil {
			t.Fatalf("decode schema: %v", err)
		}
		if again, changed, err := Evolve(change.DataFields(back), recs, opt); err != nil || changed {
			t.Fatalf("evolving the IPC round-tripped schema by its own records: changed=%v err=%v\n%s\n%s", changed, err, sig(fs), sig(again))
		}
		// Record → Arrow → IPC → Arrow → JSON keeps every non-null value.
		rec, err := Build(mem, back, rowsOf(recs), opt)
		if err != nil {
			t.Fatalf("build against the inferred schema %s: %v", sig(fs), err)
		}
		ipcBytes, err := protocol.EncodeRecord(mem, rec)
		rec.Release()
		if err != nil {
			t.Fatalf("encode batch: %v", err)
		}
		decoded, _, err := protocol.DecodeRecords(mem, ipcBytes)
		if err != nil {
			t.Fatalf("decode batch: %v", err)
		}
		if len(decoded) != 1 || decoded[0].NumRows() != int64(len(recs)) {
			t.Fatalf("decoded %d batches, want one of %d rows", len(decoded), len(recs))
		}
		out := rowsToGo(decoded[0])
		for _, d := range decoded {
			d.Release()
		}
		for i, r := range recs {
			for k, v := range r {
				if err := sameValue(v, out[i][k], "/"+k); err != nil {
					t.Fatalf("record %d: %v (schema %s)", i, err, sig(fs))
				}
			}
		}
	})
}

// decodeFuzz reads NDJSON objects, or one JSON array of objects; nil when the data is neither.
func decodeFuzz(data []byte) []map[string]any {
	if recs, err := decodeNDJSON(string(data)); err == nil && len(recs) > 0 {
		return recs
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var arr []map[string]any
	if err := dec.Decode(&arr); err != nil || len(arr) == 0 {
		return nil
	}
	for _, r := range arr {
		if r == nil {
			return nil
		}
	}
	return arr
}

func sameFields(a, b []arrow.Field) bool {
	return arrow.NewSchema(a, nil).Equal(arrow.NewSchema(b, nil)) && sig(a) == sig(b)
}
