package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"

	pluginv2 "github.com/skippr-dev/skippr/plugin-sdk/proto/skippr/plugin/v2"
)

// pipelineSource echoes the pipeline a Read or a teardown is for: the Read as its checkpoint's position.
type pipelineSource struct{ truncSource }

func (pipelineSource) Read(ctx context.Context, req ReadRequest, out Emitter) error {
	return out.Checkpoint(ctx, Checkpoint{Position: []byte("pipeline=" + req.Pipeline), Idle: true})
}

func (pipelineSource) TeardownPipeline(_ context.Context, _ json.RawMessage, pipeline string) ([]string, error) {
	return []string{"pipeline=" + pipeline}, nil
}

// TestPipelineReachesSource: ReadRequest.pipeline and TeardownRequest.pipeline reach the source (the MySQL
// source derives its server_id from them), and an engine that sends none gives "".
func TestPipelineReachesSource(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := startServer(t, pipelineSource{}, memory.DefaultAllocator)
	for _, name := range []string{"orders", ""} {
		rs, err := c.Read(ctx, &pluginv2.ReadRequest{Pipeline: name})
		if err != nil {
			t.Fatal(err)
		}
		var got string
		for {
			m, err := rs.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if cp, ok := m.Msg.(*pluginv2.ReadMessage_Checkpoint); ok {
				got = string(cp.Checkpoint.Position)
			}
		}
		if got != "pipeline="+name {
			t.Errorf("Read for pipeline %q: the source saw %q", name, got)
		}
		td, err := c.Teardown(ctx, &pluginv2.TeardownRequest{Pipeline: name})
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(td.Released) != "[pipeline="+name+"]" {
			t.Errorf("Teardown for pipeline %q: the source saw %v", name, td.Released)
		}
	}
}
