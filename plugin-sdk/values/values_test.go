package values

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
)

func TestParsePolicy(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Policy
		err  string
	}{
		{"", Fail, ""},
		{"fail", Fail, ""},
		{"null_and_record", NullAndRecord, ""},
		{"null", "", `on_unrepresentable "null" is not one of fail, null_and_record`},
	} {
		got, err := ParsePolicy(tc.in)
		if got != tc.want || (err == nil) != (tc.err == "") || (err != nil && err.Error() != tc.err) {
			t.Errorf("ParsePolicy(%q) = %q, %v; want %q, %q", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestHandle(t *testing.T) {
	nan := Unrepresentablef("NaN", "numeric NaN has no decimal128(10,2) value")
	key := func() string { return KeyText([]string{"id"}, []string{"7"}) }
	for _, tc := range []struct {
		name    string
		policy  Policy
		where   Where
		err     error
		class   fault.Class
		msg     string // substring of the error
		changes []Change
	}{
		{"fail names table column key value", Fail, Where{Table: "public.t", Column: "price", Key: key}, nan, fault.Data,
			"table public.t, column price, key id=7: value NaN: numeric NaN has no decimal128(10,2) value", nil},
		{"null_and_record records", NullAndRecord, Where{Table: "public.t", Column: "price", Key: key}, fmt.Errorf("decode: %w", nan), fault.Unknown,
			"", []Change{{Column: "price", Reason: "numeric NaN has no decimal128(10,2) value", Value: "NaN"}}},
		{"key column fails under null_and_record", NullAndRecord, Where{Table: "public.t", Column: "id", Key: key, IsKey: true}, nan, fault.Data,
			"key id=7", nil},
		{"other errors pass through", NullAndRecord, Where{Table: "public.t", Column: "price"}, errors.New("boom"), fault.Unknown, "boom", nil},
		{"a hidden column's decode error is not shown", NullAndRecord, Where{Table: "public.t", Column: "secret"}, fmt.Errorf("uuid %q: want 32 hex digits", "CLEAR-9"), fault.Unknown,
			"table public.t, column secret: a value does not decode", nil},
		{"a hidden column's value is not shown", Fail, Where{Table: "public.t", Column: "secret", Key: key}, Unrepresentablef("CLEAR-9", "no value"), fault.Data,
			"table public.t, column secret, key id=7: a value this type cannot hold (not shown", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			h := NewHandler(tc.policy, slog.New(slog.NewTextHandler(&logs, nil)))
			h.Hide(func(table, column string) bool { return column == "secret" })
			var row Row
			err := h.Handle(tc.where, tc.err, &row)
			if err != nil && tc.where.Column == "secret" && strings.Contains(err.Error(), "CLEAR-9") {
				t.Fatalf("the error shows a hidden value: %v", err)
			}
			if (err == nil) != (tc.msg == "") || (err != nil && !strings.Contains(err.Error(), tc.msg)) {
				t.Fatalf("err = %v, want one containing %q", err, tc.msg)
			}
			if got := fault.ClassOf(err); got != tc.class {
				t.Errorf("class %v, want %v", got, tc.class)
			}
			if tc.class == fault.Data && !strings.Contains(fault.FixOf(err), "change the value in the source") {
				t.Errorf("fix %q does not say what to do", fault.FixOf(err))
			}
			if tc.policy == Fail && tc.class == fault.Data && !strings.Contains(fault.FixOf(err), "on_unrepresentable: null_and_record") {
				t.Errorf("fix %q does not name the setting", fault.FixOf(err))
			}
			if row.Changed() != (tc.changes != nil) {
				t.Fatalf("changed = %v, want %v", row.Changed(), tc.changes != nil)
			}
			if tc.changes == nil {
				return
			}
			var m Meta
			if err := json.Unmarshal([]byte(row.JSON()), &m); err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(m.Changes) != fmt.Sprint(tc.changes) {
				t.Errorf("changes %v, want %v", m.Changes, tc.changes)
			}
			if !strings.Contains(logs.String(), "column=public.t.price") {
				t.Errorf("no log line for the replacement: %q", logs.String())
			}
		})
	}
}

// TestCountsAndLogsOncePerMinute: every replacement is counted, the log speaks once a minute per column.
func TestCountsAndLogsOncePerMinute(t *testing.T) {
	var logs bytes.Buffer
	h := NewHandler(NullAndRecord, slog.New(slog.NewTextHandler(&logs, nil)))
	now := time.Unix(0, 0)
	h.now = func() time.Time { return now }
	w := Where{Table: "s.t", Column: "ts"}
	for i := 0; i < 5; i++ {
		var row Row
		if err := h.Handle(w, Unrepresentablef("infinity", "no timestamp[us] value"), &row); err != nil {
			t.Fatal(err)
		}
		now = now.Add(20 * time.Second)
	}
	if got := h.Counts()["s.t.ts"]; got != 5 {
		t.Errorf("count %d, want 5", got)
	}
	// At 0 s (first), 60 s (4th): two lines.
	if n := strings.Count(logs.String(), "unrepresentable values"); n != 2 {
		t.Errorf("%d log lines, want 2:\n%s", n, logs.String())
	}
}

func TestFieldsAndReserved(t *testing.T) {
	data := []arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}}
	if got := Fail.Fields(data); len(got) != 1 {
		t.Errorf("fail adds a column: %v", got)
	}
	got := NullAndRecord.Fields(data)
	if len(got) != 2 || got[1].Name != "_skippr_meta" || len(data) != 1 {
		t.Fatalf("null_and_record fields %v", got)
	}
	sc := change.Schema(got, []string{"id"})
	var names []string
	for _, f := range change.DataFields(sc) {
		names = append(names, f.Name)
	}
	if strings.Join(names, ",") != "id,_skippr_meta" {
		t.Errorf("data fields %v: the meta column is data, the op and position are not", names)
	}
}
