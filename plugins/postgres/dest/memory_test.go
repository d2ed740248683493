package dest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/conformance"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/plugins/postgres/dest"
	"github.com/skippr-dev/skippr/testkit/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestApplyHoldsOneEntry applies a range of many entries metered by conformance.EntryMeter: the destination
// may keep the entry it is reading, not the range (README, Memory). The table must then hold each key's last
// change.
func TestApplyHoldsOneEntry(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := pgtest.NewDB(t)
	raw, _ := json.Marshal(map[string]any{"host": db.Server.Host, "port": db.Server.Port, "user": "postgres", "database": db.Name, "sslmode": "disable"})
	x, err := dest.New().Open(ctx, raw)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	sc := change.Schema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "v", Type: arrow.BinaryTypes.String}}, []string{"id"})
	const entries, perEntry = 30, 300
	m := conformance.NewEntryMeter(entries, perEntry)
	r := serve.NewRange(serve.ApplyRequest{Pipeline: "p", FirstSequence: 1, Sequence: entries}, m.Items(sc, "public.events"))
	if _, err := x.Apply(ctx, r); err != nil {
		t.Fatal(err)
	}
	m.Check(t)
	var n int
	var last string
	db.QueryRow(t, []any{&n, &last}, `SELECT count(*), min(v) FROM public.events`)
	if n != perEntry || !strings.HasSuffix(last, fmt.Sprintf("-%d", entries)) {
		t.Fatalf("%d rows, smallest value %q; want %d rows, each the last change (…-%d)", n, last, perEntry, entries)
	}
}
