package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/skippr-dev/skippr/plugin-sdk/lakequery"
	pluginv2 "github.com/skippr-dev/skippr/plugin-sdk/proto/skippr/plugin/v2"
)

// Offers reports whether a plugin's spec names an optional service (lakequery.Service…).
func Offers(spec *pluginv2.SpecResponse, service string) bool {
	return slices.Contains(spec.GetServices(), service)
}

// LakePlan asks a lake plugin for its tables' current snapshots and a pipeline's fences.
func (c *Client) LakePlan(ctx context.Context, settings []byte, req lakequery.PlanRequest) (lakequery.Plan, error) {
	r, err := c.rpc.LakePlan(ctx, &pluginv2.LakePlanRequest{Settings: settings, Pipeline: req.Pipeline, Streams: req.Streams, FetchDir: req.FetchDir})
	if err != nil {
		return lakequery.Plan{}, c.wrap("plan lake", err)
	}
	var p lakequery.Plan
	if err := json.Unmarshal(r.Plan, &p); err != nil {
		return lakequery.Plan{}, fmt.Errorf("plugin %s plan lake: decode plan: %w", c.name, err)
	}
	return p, nil
}

// LakeCompact asks a lake plugin to maintain one table; it returns the plugin's JSON report.
func (c *Client) LakeCompact(ctx context.Context, settings []byte, req lakequery.CompactRequest) (json.RawMessage, error) {
	r, err := c.rpc.LakeCompact(ctx, &pluginv2.LakeCompactRequest{
		Settings:           settings,
		Table:              req.Table,
		ExpireOlderThanMs:  millis(req.ExpireOlderThan),
		RetainLast:         int32(req.RetainLast),
		OrphansOlderThanMs: millis(req.OrphansOlderThan),
		TargetFileSize:     req.TargetFileSize,
	})
	if err != nil {
		return nil, c.wrap("compact "+req.Table, err)
	}
	return r.Report, nil
}

// millis rounds a positive duration up to a whole millisecond: zero means "the plugin's default" on the wire,
// so a duration under 1 ms must not become it.
func millis(d time.Duration) int64 {
	ms := d.Milliseconds()
	if d > 0 && d%time.Millisecond != 0 {
		ms++
	}
	return ms
}

// Query sends the query stream that write produces to a query engine and copies the result to out; it returns
// the engine's summary. An error in the SQL wraps lakequery.ErrSQL with the engine's message.
func (c *Client) Query(ctx context.Context, write func(io.Writer) error, out io.Writer) (string, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := c.rpc.Query(ctx)
	if err != nil {
		return "", c.wrap("query", err)
	}
	sent := make(chan error, 1)
	go func() {
		err := write(&querySender{s: s})
		switch {
		case errors.Is(err, io.EOF):
			// Send's io.EOF: the engine ended the call before reading the stream whole (it refused it at
			// once: a WAL cache that lacks the entries the stream builds on, a statement it rejects). Its
			// answer arrives through Recv; cancelling here would replace it with "canceled". An engine that
			// ended the call with success having read part of the stream is caught below.
		case err != nil:
			// Ending the stream would look like its end: the engine would answer over part of the WAL.
			// Cancelling fails the call on both sides instead.
			cancel()
		default:
			err = s.CloseSend()
		}
		sent <- err
	}()
	var summary string
	for {
		m, err := s.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if ctx.Err() != nil { // cancelled: by a failed writer (its error says why) or by the caller
				if serr := <-sent; serr != nil {
					return "", fmt.Errorf("send query stream: %w", serr)
				}
			}
			if st, ok := status.FromError(err); ok && st.Code() == codes.InvalidArgument {
				return "", fmt.Errorf("%w: %s", lakequery.ErrSQL, st.Message())
			}
			if st, ok := status.FromError(err); ok && st.Code() == codes.ResourceExhausted {
				return "", fmt.Errorf("%w: %s", lakequery.ErrMemory, st.Message())
			}
			if st, ok := status.FromError(err); ok && st.Code() == codes.Aborted {
				return "", fmt.Errorf("%w: %s", lakequery.ErrStale, st.Message())
			}
			return "", c.wrap("query", err)
		}
		if len(m.Data) > 0 {
			if _, err := out.Write(m.Data); err != nil {
				return "", fmt.Errorf("write query result: %w", err)
			}
		}
		if m.Summary != "" {
			summary = m.Summary
		}
	}
	// The engine answered only after reading the whole stream, so the writer is done or failed.
	if err := <-sent; err != nil {
		return "", fmt.Errorf("send query stream: %w", err)
	}
	return summary, nil
}

// querySender turns writes into QueryInput messages, each at most 1 MiB.
type querySender struct {
	s pluginv2.Plugin_QueryClient
}

func (q *querySender) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := min(len(p), 1<<20)
		// Send keeps no reference after it returns for a client stream, but the caller may reuse p: copy.
		if err := q.s.Send(&pluginv2.QueryInput{Data: append([]byte(nil), p[:k]...)}); err != nil {
			return n, err
		}
		p, n = p[k:], n+k
	}
	return n, nil
}
