package source

import (
	"reflect"
	"strings"
	"testing"
)

func TestDecodePosition(t *testing.T) {
	p := Position{V: positionVersion, Phase: PhaseSnapshot, Slot: "s", LSN: "0/16B3748", Tables: []string{"public.a", "public.b"}, Table: "public.b",
		Progress: map[string]TableProgress{"public.a": {Done: true}, "public.b": {Key: []string{"7"}}}, Rows: 7,
		Copied: map[string]string{"public.b": "0/16B4000"}, Recopy: map[string]RecopyProgress{"public.a": {Rows: 3, Truncate: true}}}
	got, err := DecodePosition(p.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Encode()) != string(p.Encode()) || got.LSNValue() != 0x16B3748 {
		t.Errorf("round trip: %s, want %s", got.Encode(), p.Encode())
	}
	if p, err := DecodePosition(nil); p != nil || err != nil {
		t.Errorf("empty checkpoint: %v %v, want nil, nil", p, err)
	}
	for _, tc := range []struct{ in, err string }{
		{`42`, "not a postgres source position"},
		{`{"v":3,"phase":"stream","lsn":"0/1"}`, "format version 3"},
		{`{"v":2,"phase":"later","lsn":"0/1"}`, `unknown phase "later"`},
		{`{"v":2,"phase":"stream","lsn":"xyz"}`, "bad lsn"},
		{`{"v":2,"phase":"snapshot","lsn":"0/1","tables":["a"],"table":"b"}`, "not among its tables"},
		{`{"v":2,"phase":"snapshot","lsn":"0/1","tables":["a"],"progress":{"b":{"done":true}}}`, `progress of table "b"`},
		{`{"v":1,"phase":"snapshot","lsn":"0/1","tables":["a"]}`, "no table being copied"},
		{`{"v":2,"phase":"stream","lsn":"0/1","tables":["a"],"copied":{"b":"0/2"}}`, `copy of table "b"`},
		{`{"v":2,"phase":"stream","lsn":"0/1","tables":["a"],"copied":{"a":"zz"}}`, `bad copy lsn "zz"`},
		{`{"v":2,"phase":"stream","lsn":"0/1","tables":["a"],"recopy":{"b":{}}}`, `copy of table "b"`},
	} {
		if _, err := DecodePosition([]byte(tc.in)); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: got %v, want an error containing %q", tc.in, err, tc.err)
		}
	}
}

// Checkpoints written by the plugin before tables were copied in parallel still resume where they were.
func TestDecodeVersion1Position(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want map[string]TableProgress
	}{
		{`{"v":1,"phase":"snapshot","slot":"s","lsn":"0/1","tables":["a","b","c"],"table":"b","key":["10"],"rows":30}`,
			map[string]TableProgress{"a": {Done: true}, "b": {Key: []string{"10"}}}},
		{`{"v":1,"phase":"snapshot","slot":"s","lsn":"0/1","tables":["a","b"],"table":"a"}`, map[string]TableProgress{}},
	} {
		p, err := DecodePosition([]byte(tc.in))
		if err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		if !reflect.DeepEqual(p.Progress, tc.want) || p.V != positionVersion || p.Key != nil {
			t.Errorf("%s: decoded as %s, want progress %v", tc.in, p.Encode(), tc.want)
		}
	}
	p, err := DecodePosition([]byte(`{"v":1,"phase":"stream","slot":"s","lsn":"0/5","tables":["a"]}`))
	if err != nil || p.Phase != PhaseStream || p.LSNValue() != 5 {
		t.Errorf("version 1 stream position: %+v, %v", p, err)
	}
}
