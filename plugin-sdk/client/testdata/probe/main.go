// Command probe is a plugin for the client's own tests: its environment decides the protocol versions it
// offers, the size of its batches and when it crashes.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/skippr-dev/skippr/plugin-sdk/change"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

type probe struct{}

func (probe) Spec() serve.Spec {
	return serve.Spec{Name: "probe", Version: "0.0.1", Kind: serve.KindSource, SettingsSchema: json.RawMessage(`{"type":"object"}`)}
}

func (probe) Check(context.Context, json.RawMessage) error { return nil }

var schema = change.Schema([]arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "blob", Type: arrow.BinaryTypes.String}}, []string{"id"})

func (probe) Discover(context.Context, json.RawMessage) ([]serve.Stream, error) {
	return []serve.Stream{{Name: "t", Schema: schema, PrimaryKey: []string{"id"}}}, nil
}

func (probe) Read(ctx context.Context, _ serve.ReadRequest, out serve.Emitter) error {
	rows, _ := strconv.Atoi(os.Getenv("PROBE_ROWS"))
	width, _ := strconv.Atoi(os.Getenv("PROBE_WIDTH"))
	b := change.NewBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	blob := make([]byte, width)
	for i := range blob {
		blob[i] = 'a' + byte(i%26)
	}
	for i := 0; i < rows; i++ {
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		b.Field(1).(*array.StringBuilder).Append(string(blob))
		b.Row(change.OpInsert, "")
	}
	rec := b.NewBatch()
	defer rec.Release()
	if err := out.Batch(ctx, "t", rec); err != nil {
		return err
	}
	if os.Getenv("PROBE_CRASH") != "" {
		// A panic writes to file descriptor 2 directly, as a real crash does.
		panic("probe: about to crash on purpose")
	}
	if err := out.Checkpoint(ctx, serve.Checkpoint{Position: []byte("1"), Idle: true}); err != nil {
		return err
	}
	<-ctx.Done()
	return ctx.Err()
}

func (probe) Ack(context.Context, []byte) error { return nil }

func main() {
	if f := os.Getenv("PROBE_INFO"); f != "" {
		// The test that kills the host reads who to watch, and how the host started us.
		if err := os.WriteFile(f, []byte(fmt.Sprintf("%d %d\n", os.Getpid(), pdeathsig())), 0o644); err != nil {
			panic(err)
		}
	}
	if d, err := time.ParseDuration(os.Getenv("PROBE_START_DELAY")); err == nil {
		// A plugin slow to say its handshake line (a big binary on a loaded host), for the tests that cancel a
		// start half-way.
		time.Sleep(d)
	}
	var versions []int
	if v := os.Getenv("PROBE_PROTOCOL"); v != "" {
		for _, f := range strings.Split(v, ",") {
			n, _ := strconv.Atoi(f)
			versions = append(versions, n)
		}
	}
	if versions == nil {
		serve.Serve(probe{})
		return
	}
	serve.Serve(probe{}, serve.WithProtocolVersions(versions...))
}
