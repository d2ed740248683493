package main

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/rowmeta/rowmetatest"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// TestRowMeta runs the SDK's soft delete and metadata columns check (plugin-sdk/rowmeta/rowmetatest) through
// the plugin process, for each setting, each cut of the change sequence into ranges, and the replays.
func TestRowMeta(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	c := startPlugin(t)
	conn := db.Connect(t)
	for _, tc := range rowmetatest.Cases() {
		t.Run(tc.Name, func(t *testing.T) {
			// on opens the target of schema rm_<case>_<name> with the case's settings, or without them.
			on := func(name string, with bool) rowmetatest.Target {
				schema := "rm_" + tc.Name + "_" + name
				extra := map[string]any{"schema": schema}
				if with {
					for k, v := range tc.Settings {
						extra[k] = v
					}
				}
				return rowmetatest.Target{Apply: rowmetatest.ClientApply(c, settings(db, extra), "p"), Read: readSchemaTable(conn, schema)}
			}
			target := func(t *testing.T, name string) rowmetatest.Target { return on(name, true) }
			rowmetatest.Run(t, tc, target)
			t.Run("clash", func(t *testing.T) { rowmetatest.CheckClash(t, tc, target(t, "clash")) })
			t.Run("resnapshot", func(t *testing.T) { rowmetatest.CheckResnapshot(t, tc, target(t, "resnapshot")) })
			t.Run("keyless", func(t *testing.T) { rowmetatest.CheckKeyless(t, tc, target(t, "keyless")) })
			t.Run("turned on", func(t *testing.T) { rowmetatest.CheckTurnedOn(t, tc, on("turned_on", false), on("turned_on", true)) })
		})
	}
}

// TestRowMetaOverride runs the SDK's per-table override check (rowmetatest.CheckOverride) through the plugin
// process: a destination's table_options entry changes soft_delete, metadata_columns and history for its
// stream only, the other stream in the same pipeline keeping the connection's.
func TestRowMetaOverride(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	c := startPlugin(t)
	conn := db.Connect(t)
	for _, tc := range rowmetatest.OverrideCases() {
		t.Run(tc.Name, func(t *testing.T) {
			target := func(t *testing.T, name string) rowmetatest.Target {
				schema := "ov_" + tc.Name + "_" + name
				extra := map[string]any{"schema": schema}
				maps.Copy(extra, tc.Settings)
				return rowmetatest.Target{Apply: rowmetatest.ClientApply(c, settings(db, extra), "p"), Read: readSchemaTable(conn, schema)}
			}
			rowmetatest.CheckOverride(t, tc, target)
			// The stream's own options decide a clash and what a re-snapshot's end does.
			t.Run("clash", func(t *testing.T) { rowmetatest.CheckClash(t, tc.Case, target(t, "clash")) })
			t.Run("resnapshot", func(t *testing.T) { rowmetatest.CheckResnapshot(t, tc.Case, target(t, "resnapshot")) })
		})
	}
}

// TestRowMetaSettings: a setting the SDK refuses is refused by the plugin's check (what `skippr sync` runs at
// start), naming it.
func TestRowMetaSettings(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	c := startPlugin(t)
	ctx := context.Background()
	for _, tc := range []struct {
		cols any
		want string
	}{
		{[]string{"when"}, `unknown column "when"`},
		{[]string{"op", "op"}, `lists "op" twice`},
	} {
		err := c.Check(ctx, settings(db, map[string]any{"schema": "out", "metadata_columns": tc.cols}))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("metadata_columns %v: check returned %v, want an error containing %q", tc.cols, err, tc.want)
		}
	}
}

// TestTableOptionsRoles: the plugin's check (what `skippr sync` runs at start) refuses a source key in a
// destination's table_options and a destination key in a source's, as config faults naming the key; the
// destination's own per-stream keys pass.
func TestTableOptionsRoles(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	db.Exec(t, `CREATE TABLE t (id int PRIMARY KEY)`)
	c := startPlugin(t)
	ctx := context.Background()
	for _, tc := range []struct {
		extra map[string]any
		want  string
	}{
		{map[string]any{"schema": "out", "table_options": map[string]any{"public.t": map[string]any{"where": "id > 1"}}}, "table_options.public.t.where is a source setting"},
		{map[string]any{"tables": []string{"t"}, "table_options": map[string]any{"t": map[string]any{"history": true}}}, "table_options.t.history is a destination setting"},
		{map[string]any{"schema": "out", "table_options": map[string]any{"mysql.db.t": map[string]any{"history": true, "soft_delete": true}}}, ""},
	} {
		err := c.Check(ctx, settings(db, tc.extra))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: check returned %v", tc.extra, err)
		case tc.want != "" && (err == nil || !errors.Is(err, fault.ErrConfig) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v: check returned %v, want a config fault containing %q", tc.extra, err, tc.want)
		}
	}
}
