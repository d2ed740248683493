// Package queryclient lets the one-shot `skippr query` answer through a running `skippr serve` instead of
// starting its plugins: a point lookup then costs one gRPC call (≈ 10–30 ms) instead of three plugin starts,
// a lake plan and a WAL read (≈ 0.7 s).
//
// The protocol is one Flight action on the Flight SQL endpoint, DoAction of type Action with a JSON Request
// as its body: the server runs the statement exactly as `skippr query` would (same engine, same output
// format), and streams the formatted output back as Flight Results, each body the next bytes of it; the
// engine's summary line (rows, time) comes in the trailer SummaryKey. Formatting on the server is what keeps
// the answers byte-identical to the plugin path (the table, CSV and JSON renderings are the query engine's).
//
// Why not a Flight SQL client here: the core stays under 25 MB (issue #20), and arrow-go's Flight packages
// bring gRPC's server side with them (see cmd/internal/servecli). gRPC's client is linked already (the
// plugins), so this package speaks the two Flight messages it needs, Action{type=1, body=2} and
// Result{body=1}, with protowire and a codec of raw bytes: a few kilobytes of code.
package queryclient

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/skippr-dev/skippr/engine/lakequery"
	sdk "github.com/skippr-dev/skippr/plugin-sdk/lakequery"
)

// Action is the Flight action type that runs one statement formatted for `skippr query`.
const Action = "skippr.query"

// SummaryKey is the trailer holding the engine's summary line.
const SummaryKey = "skippr-summary"

// ChunkSize is the largest Result body the server sends (well under gRPC's 4 MB message limit).
const ChunkSize = 256 << 10

// Request is the action's body.
type Request struct {
	SQL      string `json:"sql"`
	Format   string `json:"format"`
	AsOfLake bool   `json:"as_of_lake,omitempty"`
	// IncludeDeleted: a server that does not know it ignores it (and hides soft-deleted rows).
	IncludeDeleted bool `json:"include_deleted,omitempty"`
}

// ErrUnreachable: the server could not be reached (nothing was written to the output), so the caller may
// answer another way.
var ErrUnreachable = errors.New("query server unreachable")

// doAction is Flight's DoAction method.
const doAction = "/arrow.flight.protocol.FlightService/DoAction"

// Client talks to one server. It implements lakequery.Runner.
type Client struct {
	addr  string
	token string
	conn  *grpc.ClientConn
}

// Dial prepares a client of the server at addr: host:port or grpc://host:port in plain text, grpc+tls://
// host:port over TLS checked against the system's roots. token, when set, is sent as a bearer token. No
// connection is made until the first Run.
func Dial(addr, token string) (*Client, error) {
	creds := insecure.NewCredentials()
	target := addr
	switch {
	case strings.HasPrefix(addr, "grpc+tls://"):
		target = strings.TrimPrefix(addr, "grpc+tls://")
		creds = credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12})
	case strings.HasPrefix(addr, "grpc://"):
		target = strings.TrimPrefix(addr, "grpc://")
	case strings.Contains(addr, "://"):
		return nil, fmt.Errorf("query server %q: want host:port, grpc://host:port or grpc+tls://host:port", addr)
	}
	conn, err := grpc.NewClient("passthrough:///"+target, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, fmt.Errorf("query server %s: %w", addr, err)
	}
	return &Client{addr: addr, token: token, conn: conn}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Run sends one statement and copies the server's formatted output to out; it returns the engine's summary.
// An error in the SQL wraps sdk.ErrSQL with the engine's message, as the plugin path's does; a server that
// cannot be reached before any output is ErrUnreachable.
func (c *Client) Run(ctx context.Context, req lakequery.Request, out io.Writer) (string, error) {
	body, err := json.Marshal(Request{SQL: req.SQL, Format: req.Format, AsOfLake: req.AsOfLake, IncludeDeleted: req.IncludeDeleted})
	if err != nil {
		return "", err
	}
	if c.token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+c.token)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the call if out fails
	st, err := c.conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, doAction, grpc.ForceCodec(rawCodec{}))
	if err != nil {
		return "", c.callErr(err, false)
	}
	msg := protowire.AppendTag(nil, 1, protowire.BytesType)
	msg = protowire.AppendString(msg, Action)
	msg = protowire.AppendTag(msg, 2, protowire.BytesType)
	msg = protowire.AppendBytes(msg, body)
	if err := st.SendMsg(&msg); err != nil && !errors.Is(err, io.EOF) { // io.EOF: the status follows in RecvMsg
		return "", c.callErr(err, false)
	}
	if err := st.CloseSend(); err != nil {
		return "", c.callErr(err, false)
	}
	wrote := false
	for {
		var res []byte
		err := st.RecvMsg(&res)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", c.callErr(err, wrote)
		}
		data, err := resultBody(res)
		if err != nil {
			return "", fmt.Errorf("query server %s: %w", c.addr, err)
		}
		if len(data) == 0 {
			continue
		}
		wrote = true
		if _, err := out.Write(data); err != nil {
			return "", err
		}
	}
	var summary string
	if v := st.Trailer().Get(SummaryKey); len(v) > 0 {
		summary = v[0]
	}
	return summary, nil
}

// callErr turns the call's status into what the plugin path returns: sdk.ErrSQL and sdk.ErrMemory with the
// server's message, ErrUnreachable for a server that could not be reached before any output.
func (c *Client) callErr(err error, wrote bool) error {
	s, _ := status.FromError(err)
	msg := s.Message()
	switch s.Code() {
	case codes.InvalidArgument:
		if sql, ok := strings.CutPrefix(msg, sdk.ErrSQL.Error()+": "); ok {
			return fmt.Errorf("%w: %s", sdk.ErrSQL, sql)
		}
		// Flight SQL's own answer to an action it does not know: a server of another release.
		return fmt.Errorf("query server %s refused the request (%s): is it skippr serve of the same release?", c.addr, msg)
	case codes.ResourceExhausted:
		return fmt.Errorf("%w: %s", sdk.ErrMemory, msg)
	case codes.Unavailable:
		if !wrote {
			return fmt.Errorf("%w: %s: %s", ErrUnreachable, c.addr, msg)
		}
	case codes.Unauthenticated:
		return fmt.Errorf("query server %s: %s (set query.server_token in the config, or SKIPPR_QUERY_TOKEN)", c.addr, msg)
	case codes.Unimplemented:
		return fmt.Errorf("query server %s does not answer skippr query (%s): is it skippr serve of the same release?", c.addr, msg)
	}
	return fmt.Errorf("query server %s: %s: %s", c.addr, s.Code(), msg)
}

// resultBody decodes Flight's Result message, whose one field is body = 1.
func resultBody(b []byte) ([]byte, error) {
	var body []byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, fmt.Errorf("bad result message: %w", protowire.ParseError(n))
		}
		b = b[n:]
		if num == 1 && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return nil, fmt.Errorf("bad result message: %w", protowire.ParseError(n))
			}
			body, b = v, b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return nil, fmt.Errorf("bad result message: %w", protowire.ParseError(n))
		}
		b = b[n:]
	}
	return body, nil
}

// rawCodec sends and receives messages as the bytes they are: *[]byte both ways.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	p, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("raw codec: %T", v)
	}
	return *p, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	p, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("raw codec: %T", v)
	}
	*p = append((*p)[:0], data...)
	return nil
}

func (rawCodec) Name() string { return "proto" }

// Fallback answers through Server while it can be reached, and otherwise through the Runner Open returns
// (the plugins `skippr query` starts itself), opened at the first statement the server could not take and
// kept for the next ones. Warn is told why, once.
type Fallback struct {
	Server *Client
	Open   func(ctx context.Context) (lakequery.Runner, error)
	Warn   func(err error)

	local lakequery.Runner
}

// Run answers one statement.
func (f *Fallback) Run(ctx context.Context, req lakequery.Request, out io.Writer) (string, error) {
	if f.local == nil {
		summary, err := f.Server.Run(ctx, req, out)
		if !errors.Is(err, ErrUnreachable) {
			return summary, err
		}
		f.Warn(err)
		if f.local, err = f.Open(ctx); err != nil {
			return "", err
		}
	}
	return f.local.Run(ctx, req, out)
}

// ErrAddress: the named server's address cannot be used (a usage error, not an outage).
var ErrAddress = errors.New("bad query server address")

// Open returns what answers `skippr query`'s statements, and how to release it: with no server address, the
// plugins local opens; otherwise the server at addr (token as its bearer token), falling back to local when
// the server cannot be reached (Fallback, warn told why).
func Open(ctx context.Context, addr, token string, local func(context.Context) (*lakequery.Querier, error), warn func(error)) (lakequery.Runner, func(), error) {
	if addr == "" {
		q, err := local(ctx)
		if err != nil {
			return nil, nil, err
		}
		return q, q.Close, nil
	}
	cl, err := Dial(addr, token)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrAddress, err)
	}
	var q *lakequery.Querier
	f := &Fallback{Server: cl, Warn: warn, Open: func(ctx context.Context) (lakequery.Runner, error) {
		var err error
		q, err = local(ctx)
		return q, err
	}}
	return f, func() {
		if q != nil {
			q.Close()
		}
		cl.Close()
	}, nil
}
