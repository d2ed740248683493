// Package queryserve runs `skippr serve`: the answers of `skippr query` (SQL over the lake tables merged with
// the rows still in the WAL) as an Arrow Flight SQL endpoint, for notebooks, BI tools and programs.
//
// One lakequery.Querier serves every client for the server's life, so the lake and query engine plugins start
// once. Each statement is one Querier.Run in the engine's arrow format: the query engine's record batches
// come as an Arrow IPC stream and go to the client as Flight data as they arrive; no row is converted. A
// statement sees every WAL entry committed before it started (Run lists the WAL per statement, following
// its tail: lakequery.Options.WALCacheBytes) and one plan of each lake. What has not changed since the last
// statement is not done again: the lake plugin keeps each table's plan per snapshot, and the query engine
// keeps the WAL rows it was sent (lakequery.Options.EngineKeepsWAL), so a statement sends only the new entries.
//
// What the server offers: statements (CommandStatementQuery), prepared statements with parameters (the
// handle carries the SQL and the bound values, so a handle outlives a restart and Close frees nothing:
// params.go), GetCatalogs,
// GetDbSchemas, GetTables (with each table's Arrow schema when asked), GetTableTypes and GetSqlInfo. Updates,
// ingestion, transactions and Substrait are refused: the server is read-only, and the query engine refuses
// SQL that would reach outside its own in-memory database (the duckdb plugin's lockDown).
//
// A statement that starts with the comment `/* skippr: as_of_lake */` is answered from the lake alone, as
// `skippr query --as-of-lake` (directive.go).
//
// Limits: each statement runs under Options.Timeout (DeadlineExceeded naming --query-timeout) and within
// Options.MemoryLimit of the engine's memory (ResourceExhausted naming --query-memory), at most
// Options.MaxConcurrent run at once (the others wait, as long as their client does), and a client that
// cancels or goes away cancels the engine's query.
//
// Authentication (auth.go): bearer tokens, one per named client, compared in constant time; TLS with
// certificate reload (tls.go). The same statements serve agents as MCP tools (mcp.go).
package queryserve

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/flight/flightsql"
	"github.com/apache/arrow-go/v18/arrow/flight/flightsql/schema_ref"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/skippr-dev/skippr/engine/lakequery"
	sdk "github.com/skippr-dev/skippr/plugin-sdk/lakequery"
)

// Querier answers one statement; *lakequery.Querier is the one `skippr serve` runs.
type Querier interface {
	Run(ctx context.Context, req lakequery.Request, out io.Writer) (string, error)
}

// Options configure a Server.
type Options struct {
	Querier Querier
	// Timeout bounds each statement, from its start to its last batch (0: none).
	Timeout time.Duration
	// MemoryLimit bounds the query engine's memory per statement (DuckDB's notation, "2GB"; "": its default).
	MemoryLimit string
	// MaxConcurrent statements run at once (0: 4); the query engine holds each result's working set in memory.
	MaxConcurrent int
	Version       string // reported in GetSqlInfo
	Log           *slog.Logger
}

// Server is the Flight SQL service. Serve (serve.go) puts it on a listener.
type Server struct {
	flightsql.BaseServer
	opts  Options
	slots chan struct{}
	mem   memory.Allocator
	log   *slog.Logger
}

// New returns the server for opts.
func New(opts Options) (*Server, error) {
	if opts.Querier == nil {
		return nil, errors.New("queryserve: no querier")
	}
	if opts.MaxConcurrent <= 0 {
		opts.MaxConcurrent = 4
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	s := &Server{opts: opts, slots: make(chan struct{}, opts.MaxConcurrent), mem: memory.DefaultAllocator, log: opts.Log}
	s.Alloc = s.mem
	for id, v := range map[flightsql.SqlInfo]any{
		flightsql.SqlInfoFlightSqlServerName:             "skippr",
		flightsql.SqlInfoFlightSqlServerVersion:          opts.Version,
		flightsql.SqlInfoFlightSqlServerArrowVersion:     "18",
		flightsql.SqlInfoFlightSqlServerReadOnly:         true,
		flightsql.SqlInfoFlightSqlServerSql:              true,
		flightsql.SqlInfoFlightSqlServerSubstrait:        false,
		flightsql.SqlInfoFlightSqlServerTransaction:      int32(0), // SQL_SUPPORTED_TRANSACTION_NONE
		flightsql.SqlInfoFlightSqlServerCancel:           false,    // a client cancels by ending its DoGet
		flightsql.SqlInfoFlightSqlServerStatementTimeout: int32(opts.Timeout / time.Second),
	} {
		if err := s.RegisterSqlInfo(id, v); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// errTimeout is the cause of a statement's context ending at Options.Timeout.
var errTimeout = errors.New("query timeout")

// query runs sql and returns the result's schema and its batches as they come. The statement's context ends
// with ctx (the client's call) or at the timeout; the engine's query stops with it. A leading
// `/* skippr: as_of_lake */` answers from the lake alone, `/* skippr: include_deleted */` shows soft-deleted
// rows too (directive.go).
func (s *Server) query(ctx context.Context, sql string) (*arrow.Schema, <-chan flight.StreamChunk, error) {
	sql, d := directive(sql)
	if strings.TrimSpace(sql) == "" {
		return nil, nil, status.Error(codes.InvalidArgument, "empty statement")
	}
	select {
	case s.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, s.status(ctx, ctx, context.Cause(ctx))
	}
	qctx, cancel := context.WithCancelCause(ctx)
	if s.opts.Timeout > 0 {
		var stop context.CancelFunc
		qctx, stop = context.WithTimeoutCause(qctx, s.opts.Timeout, errTimeout)
		inner := cancel
		cancel = func(err error) { stop(); inner(err) }
	}
	start := time.Now()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	var tm lakequery.Timings // written by Run's goroutine, read after done
	go func() {
		summary, err := s.opts.Querier.Run(qctx, lakequery.Request{SQL: sql, Format: sdk.FormatArrow, AsOfLake: d.asOfLake, IncludeDeleted: d.includeDeleted, MemoryLimit: s.opts.MemoryLimit, Timings: &tm}, pw)
		pw.CloseWithError(err) // nil: EOF
		if err == nil {
			s.log.Debug("query", "client", clientName(ctx), "summary", summary)
		}
		done <- err
	}()
	finish := func() {
		cancel(nil)
		<-s.slots
	}
	rdr, err := ipc.NewReader(pr, ipc.WithAllocator(s.mem))
	if err != nil {
		// No schema: the statement failed before its first byte (bad SQL, a plan that failed).
		pr.CloseWithError(err)
		if runErr := <-done; runErr != nil {
			err = runErr
		}
		finish()
		return nil, nil, s.status(ctx, qctx, err)
	}
	ch := make(chan flight.StreamChunk)
	go func() {
		defer close(ch)
		defer finish()
		defer rdr.Release()
		send := func(c flight.StreamChunk) bool {
			select {
			case ch <- c:
				return true
			case <-ctx.Done(): // the client is gone; DoGet returned
				return false
			}
		}
		var rows int64
		for rdr.Next() {
			rec := rdr.RecordBatch()
			rec.Retain()
			rows += rec.NumRows()
			if !send(flight.StreamChunk{Data: rec}) {
				rec.Release()
				break
			}
		}
		readErr := rdr.Err()
		pr.CloseWithError(io.ErrClosedPipe) // stops the engine's output if we stopped reading early
		runErr := <-done
		if err := errors.Join(runErr, readErr); err != nil && ctx.Err() == nil {
			if runErr != nil {
				err = runErr
			}
			send(flight.StreamChunk{Err: s.status(ctx, qctx, err)})
			return
		}
		s.log.Debug("query done", append([]any{"client", clientName(ctx), "rows", rows, "time", time.Since(start).Round(time.Microsecond)}, timingAttrs(&tm)...)...)
	}()
	return rdr.Schema(), ch, nil
}

// status turns a statement's error into the gRPC status a client reads: the timeout and the client's own
// cancellation first (the engine then fails with whatever the cut stream gave it), bad SQL as
// InvalidArgument with the engine's message, the WAL moving under the statement (lakequery.ErrRetry) as
// Unavailable, the code clients retry; anything else as Internal.
func (s *Server) status(ctx, qctx context.Context, err error) error {
	switch {
	case timedOut(qctx):
		return status.Errorf(codes.DeadlineExceeded, "the query ran longer than the server's limit of %s (skippr serve --query-timeout) and was stopped", s.opts.Timeout)
	case ctx.Err() != nil:
		return status.FromContextError(ctx.Err()).Err()
	case errors.Is(err, sdk.ErrSQL):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, sdk.ErrMemory):
		return status.Errorf(codes.ResourceExhausted, "the query needed more memory than the server allows a statement (skippr serve --query-memory %s): %v", s.opts.MemoryLimit, err)
	case errors.Is(err, lakequery.ErrRetry):
		return status.Error(codes.Unavailable, err.Error())
	}
	if _, ok := status.FromError(err); ok && status.Code(err) != codes.Unknown {
		return err
	}
	s.log.Warn("query failed", "client", clientName(ctx), "err", err)
	return status.Error(codes.Internal, err.Error())
}

// timedOut says the statement ended at the server's time limit. The engine's plugin learns the deadline too
// (gRPC sends it along with the call) and may end the call a moment before this process's timer fires, with a
// stream reset rather than a deadline error (seen under load: Internal "RST_STREAM … CANCEL" after 20.006 s of
// a 20 s limit); so a deadline less than a second away counts as reached.
func timedOut(qctx context.Context) bool {
	if errors.Is(context.Cause(qctx), errTimeout) {
		return true
	}
	dl, ok := qctx.Deadline()
	return ok && time.Until(dl) < time.Second
}

// GetFlightInfoStatement answers with a ticket that holds the statement: it runs when the client asks for
// the data (DoGet), so its view of the WAL is as of then. The result's schema is not known before: the
// client reads it from the stream.
func (s *Server) GetFlightInfoStatement(_ context.Context, cmd flightsql.StatementQuery, desc *flight.FlightDescriptor) (*flight.FlightInfo, error) {
	if len(cmd.GetTransactionId()) > 0 {
		return nil, status.Error(codes.InvalidArgument, "skippr serve has no transactions")
	}
	tkt, err := flightsql.CreateStatementQueryTicket([]byte(cmd.GetQuery()))
	if err != nil {
		return nil, err
	}
	return &flight.FlightInfo{Endpoint: []*flight.FlightEndpoint{{Ticket: &flight.Ticket{Ticket: tkt}}},
		FlightDescriptor: desc, TotalRecords: -1, TotalBytes: -1}, nil
}

// DoGetStatement runs the ticket's statement.
func (s *Server) DoGetStatement(ctx context.Context, tkt flightsql.StatementQueryTicket) (*arrow.Schema, <-chan flight.StreamChunk, error) {
	return s.query(ctx, string(tkt.GetStatementHandle()))
}

// CreatePreparedStatement keeps nothing: the handle is the SQL (params.go).
func (s *Server) CreatePreparedStatement(_ context.Context, req flightsql.ActionCreatePreparedStatementRequest) (flightsql.ActionCreatePreparedStatementResult, error) {
	if len(req.GetTransactionId()) > 0 {
		return flightsql.ActionCreatePreparedStatementResult{}, status.Error(codes.InvalidArgument, "skippr serve has no transactions")
	}
	if strings.TrimSpace(req.GetQuery()) == "" {
		return flightsql.ActionCreatePreparedStatementResult{}, status.Error(codes.InvalidArgument, "empty statement")
	}
	isUpdate := false
	return flightsql.ActionCreatePreparedStatementResult{Handle: handle{SQL: req.GetQuery()}.encode(), IsUpdate: &isUpdate}, nil
}

// ClosePreparedStatement has nothing to free.
func (s *Server) ClosePreparedStatement(context.Context, flightsql.ActionClosePreparedStatementRequest) error {
	return nil
}

// GetFlightInfoPreparedStatement hands the command back as the ticket.
func (s *Server) GetFlightInfoPreparedStatement(_ context.Context, _ flightsql.PreparedStatementQuery, desc *flight.FlightDescriptor) (*flight.FlightInfo, error) {
	return &flight.FlightInfo{Endpoint: []*flight.FlightEndpoint{{Ticket: &flight.Ticket{Ticket: desc.Cmd}}},
		FlightDescriptor: desc, TotalRecords: -1, TotalBytes: -1}, nil
}

// DoGetPreparedStatement runs the prepared statement with the parameters its handle holds.
func (s *Server) DoGetPreparedStatement(ctx context.Context, cmd flightsql.PreparedStatementQuery) (*arrow.Schema, <-chan flight.StreamChunk, error) {
	h, err := decodeHandle(cmd.GetPreparedStatementHandle())
	if err != nil {
		return nil, nil, err
	}
	return s.query(ctx, h.statement())
}

// DoPutPreparedStatementQuery binds parameters: the answer is a new handle holding them.
func (s *Server) DoPutPreparedStatementQuery(_ context.Context, cmd flightsql.PreparedStatementQuery, rdr flight.MessageReader, _ flight.MetadataWriter) ([]byte, error) {
	h, err := decodeHandle(cmd.GetPreparedStatementHandle())
	if err != nil {
		return nil, err
	}
	if h, err = bind(h, rdr); err != nil {
		return nil, err
	}
	return h.encode(), nil
}

var errReadOnly = status.Error(codes.PermissionDenied, "skippr serve is read-only: it answers queries over the lake and the WAL; changes go through the pipeline's source")

// DoPutCommandStatementUpdate refuses: read-only.
func (s *Server) DoPutCommandStatementUpdate(context.Context, flightsql.StatementUpdate) (int64, error) {
	return 0, errReadOnly
}

// DoPutPreparedStatementUpdate refuses: read-only.
func (s *Server) DoPutPreparedStatementUpdate(context.Context, flightsql.PreparedStatementUpdate, flight.MessageReader) (int64, error) {
	return 0, errReadOnly
}

// DoPutCommandStatementIngest refuses: read-only.
func (s *Server) DoPutCommandStatementIngest(context.Context, flightsql.StatementIngest, flight.MessageReader) (int64, error) {
	return 0, errReadOnly
}

// BeginTransaction refuses: a statement is its own snapshot.
func (s *Server) BeginTransaction(context.Context, flightsql.ActionBeginTransactionRequest) ([]byte, error) {
	return nil, status.Error(codes.Unimplemented, "skippr serve has no transactions: each statement reads its own snapshot of the lake and the WAL")
}

func infoFor(desc *flight.FlightDescriptor, sc *arrow.Schema, mem memory.Allocator) *flight.FlightInfo {
	return &flight.FlightInfo{Endpoint: []*flight.FlightEndpoint{{Ticket: &flight.Ticket{Ticket: desc.Cmd}}},
		FlightDescriptor: desc, Schema: flight.SerializeSchema(sc, mem), TotalRecords: -1, TotalBytes: -1}
}

// stream sends one batch built from columns of strings (nil: null) in schema sc.
func (s *Server) stream(sc *arrow.Schema, cols ...[]*string) (*arrow.Schema, <-chan flight.StreamChunk, error) {
	b := array.NewRecordBuilder(s.mem, sc)
	defer b.Release()
	for i, col := range cols {
		sb := b.Field(i).(*array.StringBuilder)
		for _, v := range col {
			if v == nil {
				sb.AppendNull()
			} else {
				sb.Append(*v)
			}
		}
	}
	ch := make(chan flight.StreamChunk, 1)
	ch <- flight.StreamChunk{Data: b.NewRecordBatch()}
	close(ch)
	return sc, ch, nil
}

// GetFlightInfoTableTypes: the lake's tables are the one type.
func (s *Server) GetFlightInfoTableTypes(_ context.Context, desc *flight.FlightDescriptor) (*flight.FlightInfo, error) {
	return infoFor(desc, schema_ref.TableTypes, s.mem), nil
}

// DoGetTableTypes lists TABLE.
func (s *Server) DoGetTableTypes(context.Context) (*arrow.Schema, <-chan flight.StreamChunk, error) {
	t := tableType
	return s.stream(schema_ref.TableTypes, []*string{&t})
}

// tableType is what GetTables calls every lake table (the engine defines each as a view over the lake's files
// and the WAL's rows; to a client it is a table).
const tableType = "TABLE"

// timingAttrs are a statement's lakequery.Timings as log attributes: where its time went outside the engine.
func timingAttrs(tm *lakequery.Timings) []any {
	r := func(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }
	return []any{"wal", r(tm.WAL), "plan", r(tm.Plan), "send", r(tm.Send), "entries_sent", tm.Entries,
		"stream_bytes", tm.StreamBytes, "engine_first_byte", r(tm.FirstByte), "engine", r(tm.Engine), "attempts", tm.Attempts}
}
