package dest

import (
	"fmt"
	"testing"

	"github.com/skippr-dev/skippr/plugin-sdk/conformance"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

// TestApplyHoldsOneEntry applies a range of many entries metered by conformance.EntryMeter: the destination
// may keep the entry it is reading, not the range (README, Memory). The table must then hold each key's last
// change.
func TestApplyHoldsOneEntry(t *testing.T) {
	h := newHarness(t, "")
	const entries, perEntry = 30, 300
	m := conformance.NewEntryMeter(entries, perEntry)
	req := serve.ApplyRequest{Settings: h.settings, Pipeline: "p", FirstSequence: 1, Sequence: entries}
	if _, err := h.d.ApplyStream(ctx(t), req, m.Items(userSchema, "public.users")); err != nil {
		t.Fatal(err)
	}
	m.Check(t)
	h.wantRows(fmt.Sprintf(`SELECT count(*), min(name) LIKE '%%-%d' FROM users`, entries), fmt.Sprintf("%d|true", perEntry))
}
