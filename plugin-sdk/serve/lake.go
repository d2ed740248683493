package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/skippr-dev/skippr/plugin-sdk/lakequery"
	pluginv2 "github.com/skippr-dev/skippr/plugin-sdk/proto/skippr/plugin/v2"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
)

// The optional services. A plugin offers one by implementing its interface; Serve announces it in Spec, so the
// engine finds lakes and query engines by what they do, not by their names.

// LakePlanner is a lake destination `skippr query` can read (service lake.plan).
type LakePlanner interface {
	PlanLake(ctx context.Context, settings json.RawMessage, req lakequery.PlanRequest) (lakequery.Plan, error)
}

// LakeCompactor maintains a lake destination's tables (service lake.compact). The report is JSON for the user.
type LakeCompactor interface {
	CompactLake(ctx context.Context, settings json.RawMessage, req lakequery.CompactRequest) (report json.RawMessage, err error)
}

// QueryEngine answers SQL over lake plans and WAL entries (service query.engine): it reads the query stream of
// package lakequery from in and writes the result to out. An error in the SQL itself wraps lakequery.ErrSQL.
// The summary (rows, time) is shown to the user after the result.
type QueryEngine interface {
	Query(ctx context.Context, in io.Reader, out io.Writer) (summary string, err error)
}

// WALCachingQueryEngine is a QueryEngine that keeps the WAL entries it was sent between queries and reads
// lakequery.Request.WAL (service query.wal-cache). It fails a stream that builds on entries it does not hold
// with lakequery.ErrStale.
type WALCachingQueryEngine interface {
	QueryEngine
	CachesWAL() bool
}

// services lists what p offers beside its role.
func services(p Plugin) []string {
	var out []string
	if _, ok := p.(LakePlanner); ok {
		out = append(out, lakequery.ServicePlan)
	}
	if _, ok := p.(LakeCompactor); ok {
		out = append(out, lakequery.ServiceCompact)
	}
	if _, ok := p.(QueryEngine); ok {
		out = append(out, lakequery.ServiceQuery)
	}
	if c, ok := p.(WALCachingQueryEngine); ok && c.CachesWAL() {
		out = append(out, lakequery.ServiceWALCache)
	}
	if r, ok := p.(Resnapshotter); ok && r.CanResnapshot() {
		out = append(out, protocol.ServiceResnapshot)
	}
	return out
}

func (s *server) LakePlan(ctx context.Context, req *pluginv2.LakePlanRequest) (*pluginv2.LakePlanResponse, error) {
	lp, ok := s.p.(LakePlanner)
	if !ok {
		return nil, status.Errorf(codes.Unimplemented, "plugin %s offers no %s service", s.p.Spec().Name, lakequery.ServicePlan)
	}
	plan, err := lp.PlanLake(ctx, req.Settings, lakequery.PlanRequest{Pipeline: req.Pipeline, Streams: req.Streams, FetchDir: req.FetchDir})
	if err != nil {
		return nil, toStatus(fmt.Errorf("plan lake: %w", err))
	}
	b, err := json.Marshal(plan)
	if err != nil {
		return nil, toStatus(fmt.Errorf("plan lake: %w", err))
	}
	return &pluginv2.LakePlanResponse{Plan: b}, nil
}

func (s *server) LakeCompact(ctx context.Context, req *pluginv2.LakeCompactRequest) (*pluginv2.LakeCompactResponse, error) {
	lc, ok := s.p.(LakeCompactor)
	if !ok {
		return nil, status.Errorf(codes.Unimplemented, "plugin %s offers no %s service", s.p.Spec().Name, lakequery.ServiceCompact)
	}
	report, err := lc.CompactLake(ctx, req.Settings, lakequery.CompactRequest{
		Table:            req.Table,
		ExpireOlderThan:  time.Duration(req.ExpireOlderThanMs) * time.Millisecond,
		RetainLast:       int(req.RetainLast),
		OrphansOlderThan: time.Duration(req.OrphansOlderThanMs) * time.Millisecond,
		TargetFileSize:   req.TargetFileSize,
	})
	if err != nil {
		return nil, toStatus(fmt.Errorf("compact %s: %w", req.Table, err))
	}
	return &pluginv2.LakeCompactResponse{Report: report}, nil
}

// queryChunk bounds one result message; gRPC's default limit is 4 MiB.
const queryChunk = 256 << 10

func (s *server) Query(stream pluginv2.Plugin_QueryServer) error {
	qe, ok := s.p.(QueryEngine)
	if !ok {
		return status.Errorf(codes.Unimplemented, "plugin %s offers no %s service", s.p.Spec().Name, lakequery.ServiceQuery)
	}
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	pr, pw := io.Pipe()
	go func() {
		for {
			m, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				pw.Close()
				return
			}
			if err != nil {
				pw.CloseWithError(fmt.Errorf("receive query stream: %w", err))
				return
			}
			if _, err := pw.Write(m.Data); err != nil {
				return // the engine stopped reading: its error is the answer
			}
		}
	}()
	out := &queryWriter{send: func(b []byte) error { return stream.Send(&pluginv2.QueryOutput{Data: b}) }}
	summary, err := qe.Query(ctx, pr, out)
	pr.CloseWithError(io.ErrClosedPipe) // unblock the receiver if the engine stopped early
	if err == nil {
		err = out.flush()
	}
	if errors.Is(err, lakequery.ErrSQL) {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	if errors.Is(err, lakequery.ErrMemory) {
		return status.Error(codes.ResourceExhausted, err.Error())
	}
	if errors.Is(err, lakequery.ErrStale) {
		return status.Error(codes.Aborted, err.Error())
	}
	if err != nil {
		return toStatus(err)
	}
	return stream.Send(&pluginv2.QueryOutput{Summary: summary})
}

// queryWriter sends a result in messages of up to queryChunk bytes.
type queryWriter struct {
	send func([]byte) error
	buf  []byte
}

func (w *queryWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		k := min(len(p), queryChunk-len(w.buf))
		w.buf = append(w.buf, p[:k]...)
		p = p[k:]
		if len(w.buf) == queryChunk {
			if err := w.flush(); err != nil {
				return n - len(p), err
			}
		}
	}
	return n, nil
}

func (w *queryWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	err := w.send(w.buf)
	w.buf = nil // gRPC may still hold the sent message: never reuse its bytes
	return err
}
