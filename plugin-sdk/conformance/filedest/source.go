package filedest

import (
	"context"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/client"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
)

// ReadSource reads a source from the beginning until its first idle checkpoint and folds its rows the way a
// destination must: the state a test expects a destination to hold.
func ReadSource(ctx context.Context, c *client.Client, settings []byte) (map[string]map[string]map[string]any, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rs, err := c.Read(ctx, settings, nil, nil)
	if err != nil {
		return nil, err
	}
	tables := map[string]map[string]map[string]any{}
	for {
		m, err := rs.Next()
		if err != nil {
			return nil, fmt.Errorf("read source: %w", err)
		}
		if m.Checkpoint != nil && m.Checkpoint.Idle {
			return tables, nil
		}
		if m.Truncate != "" {
			if err := Replay(tables, []Row{{Stream: m.Truncate, Truncate: true}}); err != nil {
				return nil, err
			}
			continue
		}
		if m.Batch == nil {
			continue
		}
		recs, _, err := protocol.DecodeRecords(memory.DefaultAllocator, m.Batch.IPC)
		if err != nil {
			return nil, err
		}
		for _, r := range recs {
			rows, err := ToRows(m.Batch.Stream, r)
			r.Release()
			if err != nil {
				return nil, err
			}
			if err := Replay(tables, rows); err != nil {
				return nil, err
			}
		}
	}
}
