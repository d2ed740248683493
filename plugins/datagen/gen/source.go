// Package gen is the datagen source: a deterministic change generator served as a plugin.
package gen

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/protect"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

//go:embed settings.schema.json
var settingsSchema []byte

type settings struct {
	Seed          uint64  `json:"seed"`
	Rows          int64   `json:"rows"`            // events in all; 0 = unbounded
	RowsPerSecond int64   `json:"rows_per_second"` // 0 = as fast as possible
	BatchSize     int     `json:"batch_size"`
	Stream        string  `json:"stream"`
	Nested        bool    `json:"nested"`
	UpdateRatio   float64 `json:"update_ratio"`
	DeleteRatio   float64 `json:"delete_ratio"`
	// ExcludeColumns and HashColumns keep columns out of what the source emits (plugin-sdk/protect), as the
	// Postgres, MySQL and http sources' settings of the same names do: for trying those out, and for tests.
	ExcludeColumns []string                `json:"exclude_columns"`
	HashColumns    map[string]protect.Hash `json:"hash_columns"`

	protect *protect.Set // compiled from the two above (nil: none)
}

func parseSettings(raw json.RawMessage) (settings, error) {
	s := settings{Seed: 1, BatchSize: 10000, Stream: "events"}
	if err := serve.DecodeSettings(raw, &s); err != nil {
		return s, err
	}
	switch {
	case s.BatchSize <= 0:
		return s, fmt.Errorf("settings: batch_size must be positive, got %d", s.BatchSize)
	case s.Rows < 0 || s.RowsPerSecond < 0:
		return s, fmt.Errorf("settings: rows and rows_per_second must not be negative")
	case s.UpdateRatio < 0 || s.DeleteRatio < 0 || s.UpdateRatio+s.DeleteRatio > 1:
		return s, fmt.Errorf("settings: update_ratio and delete_ratio must be >= 0 and add up to at most 1")
	case s.Stream == "":
		return s, fmt.Errorf("settings: stream must not be empty")
	}
	set, err := protect.Compile("settings", map[string]protect.Table{s.Stream: {ExcludeColumns: s.ExcludeColumns, HashColumns: s.HashColumns}})
	if err != nil {
		return s, err
	}
	// The columns are known from the settings alone: a rule naming one the stream lacks is refused always.
	if err := set.Check(s.Stream, newGenerator(s, memory.DefaultAllocator).schema, []string{"id"}, false); err != nil {
		return s, err
	}
	s.protect = set
	return s, nil
}

// Source is the datagen source plugin.
type Source struct{ Version string }

func (s *Source) Spec() serve.Spec {
	return serve.Spec{
		Name: "datagen", Version: s.Version, Kind: serve.KindSource,
		Description:    "deterministic change generator for benchmarks and tests",
		SettingsSchema: settingsSchema,
	}
}

func (s *Source) Check(_ context.Context, raw json.RawMessage) error {
	_, err := parseSettings(raw)
	return err
}

func (s *Source) Discover(_ context.Context, raw json.RawMessage) ([]serve.Stream, error) {
	st, err := parseSettings(raw)
	if err != nil {
		return nil, err
	}
	sc := newGenerator(st, memory.DefaultAllocator).schema
	return []serve.Stream{st.protect.Stream(serve.Stream{Name: st.Stream, Schema: sc, PrimaryKey: []string{"id"}, Modes: []serve.SyncMode{serve.ModeCDC}})}, nil
}

// Read emits events from the checkpoint (the index of the next event) on, one checkpoint per batch.
func (s *Source) Read(ctx context.Context, req serve.ReadRequest, out serve.Emitter) error {
	st, err := parseSettings(req.Settings)
	if err != nil {
		return err
	}
	inner, _, err := protect.Unwrap(req.Checkpoint)
	if err != nil {
		return err
	}
	next, err := parseCheckpoint(inner)
	if err != nil {
		return err
	}
	changed, wrapped, err := st.protect.Changed(req.Checkpoint, []string{st.Stream})
	if err != nil {
		return err
	}
	if len(changed) > 0 {
		// Not `skippr resnapshot`, which datagen does not offer, and not the new rules from the next event on,
		// which would leave one table holding rows of both: datagen generates every event again, the same, from
		// its index, so a pipeline started over gets them all under the new rules.
		return fault.ConfigErr(fmt.Errorf("exclude_columns or hash_columns of stream %s changed since the pipeline last ran: events already sent were protected by the old rules, and mixing both in one destination table would be wrong", st.Stream),
			"put the old rules back, or start the pipeline over under the new rules: drop the stream's table in its destinations, then rename the pipeline and give it a new wal url, so it starts from the first event (datagen generates the same events again)")
	}
	out = st.protect.Emitter(out, memory.DefaultAllocator, []string{st.Stream}, wrapped)
	g := newGenerator(st, memory.DefaultAllocator)
	defer g.release()
	start, startRow := time.Now(), next
	for {
		if st.Rows > 0 && next >= st.Rows {
			if err := out.Checkpoint(ctx, serve.Checkpoint{Position: checkpoint(next), RowsDone: next, RowsTotal: st.Rows, Idle: true}); err != nil {
				return err
			}
			<-ctx.Done()
			return ctx.Err()
		}
		n := int64(st.BatchSize)
		if st.Rows > 0 {
			n = min(n, st.Rows-next)
		}
		if st.RowsPerSecond > 0 {
			// Pace against the start so rounding never accumulates.
			due := start.Add(time.Duration(float64(next+n-startRow) / float64(st.RowsPerSecond) * float64(time.Second)))
			if d := time.Until(due); d > 0 {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(d):
				}
			}
		}
		rec := g.batch(next, n)
		err := out.Batch(ctx, st.Stream, rec)
		rec.Release()
		if err != nil {
			return err
		}
		next += n
		if err := out.Checkpoint(ctx, serve.Checkpoint{Position: checkpoint(next), RowsDone: next, RowsTotal: st.Rows}); err != nil {
			return err
		}
	}
}

// Ack needs no work: the generator can replay any event from its index.
func (s *Source) Ack(context.Context, []byte) error { return nil }

func checkpoint(next int64) []byte { return []byte(strconv.FormatInt(next, 10)) }

func parseCheckpoint(b []byte) (int64, error) {
	if len(b) == 0 {
		return 0, nil
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("checkpoint %q is not an event index", b)
	}
	return n, nil
}
