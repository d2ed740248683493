package failpoint

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		spec string
		want map[string]Term
		err  string // a part of the error; "" for none
	}{
		{spec: "", want: map[string]Term{}},
		{spec: "wal.after-segment=exit", want: map[string]Term{WALAfterSegment: {Nth: 1, Action: Exit}}},
		{spec: "wal.after-segment=3*exit", want: map[string]Term{WALAfterSegment: {Nth: 3, Action: Exit}}},
		{spec: " pipeline.after-ack = error , pipeline.apply-sent=2*sleep(150),", want: map[string]Term{
			PipelineAfterAck:  {Nth: 1, Action: Error},
			PipelineApplySent: {Nth: 2, Action: Sleep, Sleep: 150 * time.Millisecond},
		}},
		{spec: "wal.after-segmnt=exit", err: `unknown point "wal.after-segmnt"`},
		{spec: "wal.after-segment", err: "want <point>=<action>"},
		{spec: "wal.after-segment=halt", err: `unknown action "halt"`},
		{spec: "wal.after-segment=0*exit", err: "whole number from 1"},
		{spec: "wal.after-segment=x*exit", err: "whole number from 1"},
		{spec: "wal.after-segment=sleep(soon)", err: "sleep takes milliseconds"},
		{spec: "wal.after-segment=exit,wal.after-segment=error", err: "armed twice"},
		{spec: "lakequery.after-list=wait(/tmp/x/go)", want: map[string]Term{LakequeryAfterList: {Nth: 1, Action: Wait, File: "/tmp/x/go"}}},
		{spec: "lakequery.after-list=wait()", err: "wait takes a file's path"},
	} {
		got, err := Parse(tc.spec, Known())
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("Parse(%q): error %v, want one containing %q", tc.spec, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("Parse(%q): %v", tc.spec, err)
		case tc.err == "" && !reflect.DeepEqual(got, tc.want):
			t.Errorf("Parse(%q) = %+v, want %+v", tc.spec, got, tc.want)
		}
	}
}

// TestPointsUnique: two points with one name would make a test arm both.
func TestPointsUnique(t *testing.T) {
	seen := map[string]bool{}
	for _, p := range Known() {
		if seen[p] {
			t.Errorf("point %s listed twice", p)
		}
		seen[p] = true
	}
}
