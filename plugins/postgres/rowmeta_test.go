package main

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

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
				set := settings(db, extra)
				return rowmetatest.Target{
					Apply: rowmetatest.ClientApply(c, set, "p"),
					Read: func(ctx context.Context, table string) ([]string, []map[string]any, error) {
						rows, err := conn.Query(ctx, "SELECT * FROM "+pgx.Identifier{schema, table}.Sanitize())
						if err != nil {
							return nil, nil, err
						}
						defer rows.Close()
						var cols []string
						for _, f := range rows.FieldDescriptions() {
							cols = append(cols, f.Name)
						}
						var out []map[string]any
						for rows.Next() {
							vals, err := rows.Values()
							if err != nil {
								return nil, nil, err
							}
							m := map[string]any{}
							for i, v := range vals {
								m[cols[i]] = v
							}
							out = append(out, m)
						}
						return cols, out, rows.Err()
					},
				}
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
