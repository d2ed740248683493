package chaos

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/skippr-dev/skippr/test/harness"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

// TestMySQLToPostgresSurvivesSIGKILL runs a MariaDB → Postgres pipeline through `skippr sync` while a writer
// changes the source and two schema changes run, SIGKILLs the engine during the snapshot and during
// streaming, and then compares the two tables row by row.
func TestMySQLToPostgresSurvivesSIGKILL(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	m := harness.NewMySQLChaos(t, ctx, "bigint unsigned")
	dst := pgtest.NewDB(t)
	m.Config("postgres", fmt.Sprintf("{ host: %s, port: %d, user: postgres, database: %s, sslmode: disable }", dst.Server.Host, dst.Server.Port, dst.Name))
	kills := m.Run("18446744073709551615", "ALTER TABLE shop.orders ADD COLUMN note varchar(20) NOT NULL DEFAULT 'none' AFTER name")

	pc, err := pgx.Connect(ctx, dst.ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close(context.Background())
	prow, err := pc.Query(ctx, `SELECT id::text, name || '|' || coalesce(note, '<null>') || '|' || coalesce(amount::text, '') || '|' || coalesce(n::text, '') FROM orders`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for prow.Next() {
		var id, s string
		if err := prow.Scan(&id, &s); err != nil {
			t.Fatal(err)
		}
		got[id] = s
	}
	want := m.Want()
	harness.SameTable(t, want, got)
	items := map[string]string{}
	irow, err := pc.Query(ctx, `SELECT id::text, sku || '|' || qty FROM items`)
	if err != nil {
		t.Fatal(err)
	}
	for irow.Next() {
		var id, s string
		if err := irow.Scan(&id, &s); err != nil {
			t.Fatal(err)
		}
		items[id] = s
	}
	wantItems := m.WantItems()
	harness.SameTable(t, wantItems, items)
	t.Logf("%d SIGKILLs during snapshot and streaming, across 2 schema changes; %d + %d rows equal in source and destination", kills, len(want), len(wantItems))
}

// TestMySQLToIcebergSurvivesSIGKILL is the same run into the embedded Iceberg lake, compared by scanning the
// lake table (deletes applied).
func TestMySQLToIcebergSurvivesSIGKILL(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	m := harness.NewMySQLChaos(t, ctx, "bigint")
	lakeSettings := fmt.Sprintf(`{"catalog": {"warehouse": %q}, "namespace": "lake"}`, filepath.Join(m.E.Dir, "lake"))
	m.Config("iceberg", lakeSettings)
	// Nullable without a default: the lake cannot give rows that existed before the column a value (an Iceberg
	// v2 table has no initial-default; plugins/iceberg logs it), so the source's must be NULL too.
	kills := m.Run("9223372036854775807", "ALTER TABLE shop.orders ADD COLUMN note varchar(20) AFTER name")

	got := map[string]string{}
	for id, row := range harness.ScanLake(t, lakeSettings, "shop.orders") {
		text := func(col string) string {
			if row[col] == nil {
				return ""
			}
			return fmt.Sprint(row[col])
		}
		note := text("note")
		if row["note"] == nil {
			note = "<null>"
		}
		// The scan writes decimal(12,2) as a JSON number (12.5); the source as text with its scale (12.50).
		amount := text("amount")
		if f, err := strconv.ParseFloat(amount, 64); err == nil {
			amount = strconv.FormatFloat(f, 'f', 2, 64)
		}
		got[id] = text("name") + "|" + note + "|" + amount + "|" + text("n")
	}
	want := m.Want()
	harness.SameTable(t, want, got)
	items := map[string]string{}
	for id, row := range harness.ScanLake(t, lakeSettings, "shop.items") {
		items[id] = fmt.Sprint(row["sku"]) + "|" + fmt.Sprint(row["qty"])
	}
	wantItems := m.WantItems()
	harness.SameTable(t, wantItems, items)
	t.Logf("%d SIGKILLs during snapshot and streaming, across 2 schema changes; %d + %d rows equal in source and lake", kills, len(want), len(wantItems))
}
