package source

import (
	"strings"
	"testing"
)

func TestDecodePosition(t *testing.T) {
	p := Position{V: positionVersion, Phase: PhaseSnapshot, Slot: "s", LSN: "0/16B3748", Tables: []string{"public.a"}, Table: "public.a", Key: []string{"7"}, Rows: 7}
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
		{`{"v":2,"phase":"stream","lsn":"0/1"}`, "format version 2"},
		{`{"v":1,"phase":"later","lsn":"0/1"}`, `unknown phase "later"`},
		{`{"v":1,"phase":"stream","lsn":"xyz"}`, "bad lsn"},
		{`{"v":1,"phase":"snapshot","lsn":"0/1","tables":["a"],"table":"b"}`, "not among its tables"},
	} {
		if _, err := DecodePosition([]byte(tc.in)); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: got %v, want an error containing %q", tc.in, err, tc.err)
		}
	}
}
