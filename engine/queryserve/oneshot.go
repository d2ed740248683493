package queryserve

import (
	"context"
	"encoding/json"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/skippr-dev/skippr/engine/lakequery"
	"github.com/skippr-dev/skippr/engine/queryclient"
	sdk "github.com/skippr-dev/skippr/plugin-sdk/lakequery"
)

// actions is the Flight service with one action more than Flight SQL's: queryclient.Action, which answers
// the one-shot `skippr query` in its own output format (package queryclient holds the protocol and says why).
type actions struct {
	flight.FlightServer
	s *Server
}

// DoAction runs queryclient.Action and hands every other action to Flight SQL.
func (a actions) DoAction(act *flight.Action, stream flight.FlightService_DoActionServer) error {
	if act.GetType() != queryclient.Action {
		return a.FlightServer.DoAction(act, stream)
	}
	var req queryclient.Request
	if err := json.Unmarshal(act.GetBody(), &req); err != nil {
		return status.Errorf(codes.InvalidArgument, "%s: body: %v", queryclient.Action, err)
	}
	if !slices.Contains([]string{sdk.FormatTable, sdk.FormatCSV, sdk.FormatJSON, sdk.FormatParquet}, req.Format) {
		return status.Errorf(codes.InvalidArgument, "%s: format %q is not table, csv, json or parquet", queryclient.Action, req.Format)
	}
	summary, err := a.s.run(stream.Context(), lakequery.Request{SQL: req.SQL, Format: req.Format, AsOfLake: req.AsOfLake, IncludeDeleted: req.IncludeDeleted}, resultWriter{stream})
	if err != nil {
		return err
	}
	stream.SetTrailer(metadata.Pairs(queryclient.SummaryKey, summary))
	return nil
}

// resultWriter sends what it is given as Flight Results of at most queryclient.ChunkSize bytes.
type resultWriter struct {
	stream flight.FlightService_DoActionServer
}

func (w resultWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		c := p[:min(len(p), queryclient.ChunkSize)]
		if err := w.stream.Send(&flight.Result{Body: c}); err != nil { // Send has marshalled c when it returns
			return n, err
		}
		n += len(c)
		p = p[len(c):]
	}
	return n, nil
}

// run answers one statement in req.Format to out, under the same limits as a Flight SQL statement (a slot
// of MaxConcurrent, Timeout, MemoryLimit); its error is the gRPC status the client reads.
func (s *Server) run(ctx context.Context, req lakequery.Request, out io.Writer) (string, error) {
	if strings.TrimSpace(req.SQL) == "" {
		return "", status.Error(codes.InvalidArgument, "empty statement")
	}
	select {
	case s.slots <- struct{}{}:
	case <-ctx.Done():
		return "", s.status(ctx, ctx, context.Cause(ctx))
	}
	defer func() { <-s.slots }()
	qctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if s.opts.Timeout > 0 {
		var stop context.CancelFunc
		qctx, stop = context.WithTimeoutCause(qctx, s.opts.Timeout, errTimeout)
		defer stop()
	}
	req.MemoryLimit = s.opts.MemoryLimit
	var tm lakequery.Timings
	req.Timings = &tm
	start := time.Now()
	summary, err := s.opts.Querier.Run(qctx, req, out)
	if err != nil {
		return "", s.status(ctx, qctx, err)
	}
	s.log.Debug("query", append([]any{"client", clientName(ctx), "format", req.Format, "summary", summary, "time", time.Since(start).Round(time.Microsecond)}, timingAttrs(&tm)...)...)
	return summary, nil
}
