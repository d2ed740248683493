package pipeline_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/skippr-dev/skippr/engine/pipeline"
	"github.com/skippr-dev/skippr/engine/resnapshot"
)

// A resnapshot request the source cannot copy (datagen offers no source.resnapshot) or a destination cannot
// apply is refused (status says why, the request is dropped) and never reaches the source; the pipeline itself
// goes on and delivers everything.
func TestResnapshotRefusedWithoutCapability(t *testing.T) {
	for _, tc := range []struct {
		name        string
		sourceCan   bool
		destSetting string
		want        string
	}{
		{"source", false, "", "source gen (plugin datagen) cannot re-snapshot a table"},
		{"destination", true, `, "no_resnapshot": true`, "destination sink cannot apply a re-snapshot"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, dst := start(t, "datagen"), start(t, "testdest")
			srcSettings := []byte(`{"seed": 3, "rows": 2000, "batch_size": 300}`)
			out := t.TempDir()
			store := resnapshot.Store{Dir: t.TempDir()}
			if _, err := store.Add([]string{"orders"}); err != nil {
				t.Fatal(err)
			}
			cfg := config("p", src, srcSettings, plug(dst, []byte(fmt.Sprintf(`{"dir": %q%s}`, out, tc.destSetting))), openLog(t, t.TempDir()))
			cfg.Resnapshots = store
			cfg.SourceResnapshots, cfg.SourcePlugin = tc.sourceCan, "datagen"
			var last pipeline.Status
			cfg.OnStatus = func(s pipeline.Status) { last = s }
			if err := pipeline.Run(context.Background(), cfg); err != nil {
				t.Fatal(err)
			}
			assertExactlyOnce(t, out, "p", expected(t, src, srcSettings))
			got := last.Resnapshot["orders"]
			if got.State != "refused" || !strings.Contains(got.Reason, tc.want) {
				t.Fatalf("status of the request: %+v, want refused: %s", got, tc.want)
			}
			if p, err := store.Pending(); err != nil || len(p) != 0 {
				t.Fatalf("the refused request is still pending: %v %v", p, err)
			}
		})
	}
}
