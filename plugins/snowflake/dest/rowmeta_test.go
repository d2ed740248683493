package dest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/skippr-dev/skippr/plugin-sdk/conformance"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/rowmeta"
	"github.com/skippr-dev/skippr/plugin-sdk/rowmeta/rowmetatest"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/plugins/snowflake/sfsql"
)

// rowmetaTarget is tg opened with the rowmeta keys of a case (a table_options key names a stream as
// rowmetatest does; on a live account the streams carry the run's prefix, tg.stream).
func (tg *target) rowmetaTarget(keys map[string]any) rowmetatest.Target {
	tg.t.Helper()
	var m map[string]any
	if err := json.Unmarshal(tg.settings, &m); err != nil {
		tg.t.Fatal(err)
	}
	for k, v := range keys {
		if k == "table_options" {
			opts := map[string]any{}
			for st, o := range v.(map[string]any) {
				opts[tg.live(st)] = o
			}
			v = opts
		}
		m[k] = v
	}
	raw, err := json.Marshal(m)
	if err != nil {
		tg.t.Fatal(err)
	}
	return rowmetatest.Target{
		Apply: func(ctx context.Context, first, last uint64, items []serve.Item) (serve.ApplyResult, error) {
			out := slices.Clone(items)
			for i := range out {
				out[i].Stream = tg.live(out[i].Stream)
			}
			return tg.d.Apply(ctx, serve.ApplyRequest{Settings: raw, Pipeline: tg.pipeline, FirstSequence: first, Sequence: last, Items: out})
		},
		Read: tg.readTable,
	}
}

// live is a stream's name as the test sends it: with the live run's prefix (tg.stream), registered for cleanup.
func (tg *target) live(stream string) string {
	if tg.prefix == "" {
		return stream
	}
	i := strings.LastIndexByte(stream, '.') + 1
	if strings.HasPrefix(stream[i:], tg.prefix) {
		return stream
	}
	return tg.stream(stream)
}

// readTable reads a table (named as rowmetatest names it: items, items_history) as rowmetatest.Target.Read
// wants it: lower-case column names, NUMBER as int64, TIMESTAMP_TZ as time.Time.
func (tg *target) readTable(ctx context.Context, table string) ([]string, []map[string]any, error) {
	name := TableName(tg.live(table))
	rows, err := tg.db().QueryContext(ctx, sfsql.Columns(tg.s.Database), tg.s.Schema, name)
	if err != nil {
		return nil, nil, err
	}
	types := map[string]string{}
	var cols []string
	for rows.Next() {
		var c, typ string
		var p, s any
		if err := rows.Scan(&c, &typ, &p, &s); err != nil {
			rows.Close()
			return nil, nil, err
		}
		cols = append(cols, strings.ToLower(c))
		types[strings.ToLower(c)] = typ
	}
	rows.Close()
	if len(cols) == 0 {
		return nil, nil, nil // no such table
	}
	list, err := tg.list(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	var out []map[string]any
	for _, r := range list {
		row := map[string]any{}
		for k, v := range r {
			k = strings.ToLower(k)
			switch x := v.(type) {
			case json.Number:
				if n, err := x.Int64(); err == nil {
					v = n
				}
			case string:
				if strings.HasPrefix(types[k], "TIMESTAMP") {
					t, err := parseTime(x)
					if err != nil {
						return nil, nil, fmt.Errorf("%s.%s: %w", name, k, err)
					}
					v = t
				}
			}
			row[k] = v
		}
		out = append(out, row)
	}
	return cols, out, nil
}

// list reads a table's rows, each as JSON (as tg.rows, without keying them).
func (tg *target) list(ctx context.Context, name string) ([]map[string]any, error) {
	if tg.standin != nil {
		return tg.standin.Rows(ctx, name)
	}
	r, err := tg.db().QueryContext(ctx, "SELECT TO_JSON(OBJECT_CONSTRUCT_KEEP_NULL(*)) FROM "+Table(tg.s, name).String())
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var out []map[string]any
	for r.Next() {
		var j string
		if err := r.Scan(&j); err != nil {
			return nil, err
		}
		var m map[string]any
		d := json.NewDecoder(strings.NewReader(j))
		d.UseNumber()
		if err := d.Decode(&m); err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, r.Err()
}

// parseTime reads a timestamp as PostgreSQL's to_jsonb (the stand-in) or Snowflake's TO_JSON writes it.
func parseTime(s string) (time.Time, error) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02 15:04:05.999999999 -0700", "2006-01-02 15:04:05.999999999 Z07:00"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("timestamp %q in no known layout", s)
}

func rowmetaCase(t *testing.T, c rowmetatest.Case) func(t *testing.T, name string) rowmetatest.Target {
	return func(t *testing.T, name string) rowmetatest.Target {
		return newTarget(t, nil).rowmetaTarget(c.Settings)
	}
}

// overrideCases are per-stream overrides (table_options) over the connection's settings: the stream gets the
// override's options, whatever the connection says.
func overrideCases() []rowmetatest.Case {
	return []rowmetatest.Case{
		{
			Name: "override_on",
			Settings: map[string]any{"table_options": map[string]any{rowmetatest.Stream: map[string]any{
				"soft_delete": true, "metadata_columns": []any{"op", "source_committed_at"}}}},
			Options: rowmeta.Options{SoftDelete: true, Op: true, SourceCommittedAt: true},
		},
		{
			Name: "override_off",
			Settings: map[string]any{"soft_delete": true, "metadata_columns": []any{"synced_at", "position"},
				"table_options": map[string]any{rowmetatest.Stream: map[string]any{"soft_delete": false, "metadata_columns": []any{}}}},
			Options: rowmeta.Options{},
		},
	}
}

// TestRowmeta runs the SDK's check of soft deletes and metadata columns (plugin-sdk/rowmeta/rowmetatest) under
// every case, per-stream overrides included: the sequence cut four ways, replays, an overlap of the fence, a
// source column clashing with an added one, a stream without a key, and the settings turned on for a table
// that exists.
func TestRowmeta(t *testing.T) {
	for _, c := range append(rowmetatest.Cases(), overrideCases()...) {
		t.Run(c.Name, func(t *testing.T) {
			rowmetatest.Run(t, c, rowmetaCase(t, c))
			t.Run("clash", func(t *testing.T) {
				rowmetatest.CheckClash(t, c, newTarget(t, nil).rowmetaTarget(c.Settings))
			})
			if _, ok := c.Settings["table_options"]; !ok { // CheckKeyless's stream is another, without the override
				t.Run("keyless", func(t *testing.T) {
					rowmetatest.CheckKeyless(t, c, newTarget(t, nil).rowmetaTarget(c.Settings))
				})
			}
			t.Run("turned on", func(t *testing.T) {
				tg := newTarget(t, nil)
				rowmetatest.CheckTurnedOn(t, c, tg.rowmetaTarget(nil), tg.rowmetaTarget(c.Settings))
			})
		})
	}
}

// TestHistory runs the SDK's history check: every change once in <TABLE>_HISTORY, in order, however the range
// is cut, replayed or overlapped; and per stream: history on for one stream by table_options leaves another
// without a history table.
func TestHistory(t *testing.T) {
	for _, c := range rowmetatest.HistoryCases() {
		t.Run(c.Name, func(t *testing.T) { rowmetatest.CheckHistory(t, c, rowmetaCase(t, c)) })
	}
	t.Run("per stream", func(t *testing.T) {
		c := rowmetatest.Case{Name: "override", Options: rowmeta.Options{History: true, Op: true},
			Settings: map[string]any{"table_options": map[string]any{rowmetatest.Stream: map[string]any{"history": true, "metadata_columns": []any{"op"}}}}}
		rowmetatest.CheckHistory(t, c, rowmetaCase(t, c))
		tg := newTarget(t, nil)
		rt := tg.rowmetaTarget(c.Settings)
		// Another stream of the same connection: no override, so neither history nor columns.
		items := rowmetatest.Items(rowmetatest.Entries(), 1, 3)
		defer rowmetatest.Release(items)
		for i := range items {
			items[i].Stream = "public.other"
		}
		if _, err := rt.Apply(tctx(t), 1, 3, items); err != nil {
			t.Fatal(err)
		}
		cols, _, err := rt.Read(tctx(t), "other")
		if err != nil || !slices.Equal(cols, []string{"id", "v"}) {
			t.Fatalf("table OTHER has columns %v (%v), want id, v only", cols, err)
		}
		if cols, _, err := rt.Read(tctx(t), "other_history"); err != nil || len(cols) != 0 {
			t.Fatalf("OTHER_HISTORY has columns %v (%v); the stream has no history", cols, err)
		}
	})
}

// TestHistoryAcrossChunks: a range folded in many chunks (a fold budget of one byte: every batch is a chunk,
// and every change is sent as a batch of its own, so an entry spans chunks) appends each change once, in
// order, with its entry's position and its place in the entry, and the table holds what one fold of the
// range would.
func TestHistoryAcrossChunks(t *testing.T) {
	c := rowmetatest.HistoryCases()[1]
	tg := newTarget(t, nil)
	tg.dest.FoldBudget = 1
	rt := tg.rowmetaTarget(c.Settings)
	entries := rowmetatest.Entries()
	start := time.Now().Add(-time.Minute)
	for _, r := range [][2]uint64{{1, 7}, {8, 11}} {
		items := oneRowBatches(rowmetatest.Items(entries, r[0], r[1]))
		puts := tg.dest.stats.Puts
		_, err := rt.Apply(tctx(t), r[0], r[1], items)
		rowmetatest.Release(items)
		if err != nil {
			t.Fatal(err)
		}
		if p := tg.dest.stats.Puts - puts; p < int64(2*(r[1]-r[0]+1)) {
			t.Fatalf("apply %d..%d: %d files put: the range was not split into chunks", r[0], r[1], p)
		}
		got, err := rowmetatest.ReadHistory(tctx(t), rt)
		if err != nil {
			t.Fatal(err)
		}
		if want := rowmetatest.HistoryWant(entries, int(r[1])); !slices.Equal(got, want) {
			t.Fatalf("after %d..%d the history is\n%s\nwant\n%s", r[0], r[1], strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		rowmetatest.Compare(t, fmt.Sprintf("after %d..%d", r[0], r[1]), c.Options, rt, rowmetatest.Expect(entries, int(r[1]), c.Options), start)
	}
}

// oneRowBatches splits the items' batches into batches of one row each, releasing the originals.
func oneRowBatches(items []serve.Item) []serve.Item {
	var out []serve.Item
	for _, it := range items {
		if it.Record == nil {
			out = append(out, it)
			continue
		}
		for i := range it.Record.NumRows() {
			one := it
			one.Record = it.Record.NewSlice(i, i+1)
			out = append(out, one)
		}
		it.Record.Release()
	}
	return out
}

// TestKilledApplyIsReplayedOnce: a process killed inside its apply transaction, after the MERGE, the history
// INSERT and the state row, before COMMIT, leaves the transaction open; the next process aborts it (its
// writes are rolled back) and applies the same range: the history holds each change once and the table is
// as the sequence says. The killed process's COMMIT, when it wakes, fails.
func TestKilledApplyIsReplayedOnce(t *testing.T) {
	if live() {
		t.Skip("the kill is simulated with the stand-in's session")
	}
	c := rowmetatest.HistoryCases()[1]
	tg := newTarget(t, nil)
	rt := tg.rowmetaTarget(c.Settings)
	entries := rowmetatest.Entries()
	apply := func(rt rowmetatest.Target, first, last uint64) error {
		items := rowmetatest.Items(entries, first, last)
		defer rowmetatest.Release(items)
		_, err := rt.Apply(tctx(t), first, last, items)
		return err
	}
	if err := apply(rt, 1, 4); err != nil {
		t.Fatal(err)
	}
	reached, release := make(chan struct{}), make(chan struct{})
	tg.dest.beforeCommit = func(string) {
		close(reached)
		<-release
	}
	killed := make(chan error, 1)
	go func() { killed <- apply(rt, 5, 8) }()
	select {
	case <-reached:
	case err := <-killed:
		t.Fatalf("the apply to be killed ended before its COMMIT: %v", err)
	case <-time.After(90 * time.Second):
		t.Fatal("the apply to be killed never reached its COMMIT")
	}
	// The next process: a destination of its own, as after a restart.
	next := &target{t: t, d: serve.NewSessions(&Destination{TempDir: t.TempDir()}), settings: tg.settings, s: tg.s, standin: tg.standin, pipeline: tg.pipeline}
	defer next.d.Close()
	nrt := next.rowmetaTarget(c.Settings)
	for _, r := range [][2]uint64{{5, 8}, {9, 11}} {
		if err := apply(nrt, r[0], r[1]); err != nil {
			t.Fatalf("apply %d..%d after the killed one: %v", r[0], r[1], err)
		}
	}
	close(release)
	if err := <-killed; err == nil {
		t.Error("the killed apply committed after its transaction was aborted")
	}
	got, err := rowmetatest.ReadHistory(tctx(t), nrt)
	if err != nil {
		t.Fatal(err)
	}
	if want := rowmetatest.HistoryWant(entries, len(entries)); !slices.Equal(got, want) {
		t.Fatalf("the history is\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	rowmetatest.Compare(t, "after the replay", c.Options, nrt, rowmetatest.Expect(entries, len(entries), c.Options), time.Now().Add(-5*time.Minute))
}

// TestRowmetaSettingsRefused: a bad metadata column, on the connection or in a stream's override, is refused
// when the settings are parsed, naming it.
func TestRowmetaSettingsRefused(t *testing.T) {
	base := `"account":"a","user":"u","warehouse":"w","database":"d","password":"p"`
	for _, c := range []struct{ raw, want string }{
		{`{` + base + `,"metadata_columns":["synced_at","nope"]}`, "nope"},
		{`{` + base + `,"table_options":{"public.t":{"metadata_columns":["op","op"]}}}`, "public.t"},
	} {
		if _, err := ParseSettings(json.RawMessage(c.raw)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %s", c.raw, err, c.want)
		}
	}
}

// TestSettingsSchemaTakesRowmeta: the settings schema the engine validates a connection with takes the rowmeta
// keys, per connection and per stream, and still refuses an unknown key or metadata column.
func TestSettingsSchemaTakesRowmeta(t *testing.T) {
	sch, err := conformance.CompileSchema((&Destination{}).Spec().SettingsSchema)
	if err != nil {
		t.Fatal(err)
	}
	base := `"account":"a","user":"u","warehouse":"w","database":"d","password":"p"`
	for _, c := range []struct {
		raw string
		ok  bool
	}{
		{`{` + base + `,"soft_delete":true,"metadata_columns":["synced_at","source_committed_at","op","position"],"history":true}`, true},
		{`{` + base + `,"table_options":{"public.orders":{"history":true,"soft_delete":false,"metadata_columns":["op"]}}}`, true},
		{`{` + base + `,"metadata_columns":["nope"]}`, false},
		{`{` + base + `,"table_options":{"public.orders":{"bogus":true}}}`, false},
	} {
		d := json.NewDecoder(strings.NewReader(c.raw))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			t.Fatal(err)
		}
		if err := sch.Validate(v); (err == nil) != c.ok {
			t.Errorf("%s: validation %v, want ok %v", c.raw, err, c.ok)
		}
	}
}

// TestHistoryTableNameClash: a stream whose table is another stream's history table is refused with a config
// error naming both streams, instead of mixing changes into the history or rows into the mirror.
func TestHistoryTableNameClash(t *testing.T) {
	tg := newTarget(t, nil)
	rt := tg.rowmetaTarget(map[string]any{"history": true})
	items := rowmetatest.Items(rowmetatest.Entries(), 1, 1)
	defer rowmetatest.Release(items)
	other := items[0]
	other.Stream = rowmetatest.Stream + "_history"
	_, err := rt.Apply(tctx(t), 1, 1, append(items, other))
	if !errors.Is(err, fault.ErrConfig) || !strings.Contains(err.Error(), rowmetatest.Stream) || !strings.Contains(err.Error(), other.Stream) {
		t.Fatalf("streams %s (with history) and %s: %v, want a config error naming both", rowmetatest.Stream, other.Stream, err)
	}
}
