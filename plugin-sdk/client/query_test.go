package client

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/skippr-dev/skippr/plugin-sdk/lakequery"
	pluginv2 "github.com/skippr-dev/skippr/plugin-sdk/proto/skippr/plugin/v2"
)

// refusingEngine answers every query stream with code at once, reading nothing of it: what a query engine with
// a WAL cache does when the stream builds on entries it does not hold (lakequery.ErrStale).
type refusingEngine struct {
	pluginv2.UnimplementedPluginServer
	code codes.Code
}

func (e refusingEngine) Query(grpc.BidiStreamingServer[pluginv2.QueryInput, pluginv2.QueryOutput]) error {
	return status.Error(e.code, "refused before reading the stream")
}

// TestQueryRefusedMidStream: an engine that refuses a stream before reading it whole ends the call while the
// client still sends; the client's Send then fails with io.EOF. The engine's own answer (here ErrStale, which
// the server retries by sending every entry again) must reach the caller, not "send query stream: EOF", which
// skippr serve answered as an internal error (TestServeBesideSIGKILLedSync saw it under load).
func TestQueryRefusedMidStream(t *testing.T) {
	for _, tc := range []struct {
		code codes.Code
		want error
	}{
		{codes.Aborted, lakequery.ErrStale},
		{codes.InvalidArgument, lakequery.ErrSQL},
	} {
		t.Run(tc.code.String(), func(t *testing.T) {
			lis := bufconn.Listen(1 << 20)
			srv := grpc.NewServer()
			pluginv2.RegisterPluginServer(srv, refusingEngine{code: tc.code})
			go srv.Serve(lis)
			t.Cleanup(srv.Stop)
			conn, err := grpc.NewClient("passthrough:///bufnet",
				grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
				grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close() })
			c := &Client{name: "engine", rpc: pluginv2.NewPluginClient(conn), tail: newTailBuffer(1)}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			// 64 MiB: far more than the transport buffers, so a Send meets the ended call.
			chunk := make([]byte, 1<<20)
			_, err = c.Query(ctx, func(w io.Writer) error {
				for range 64 {
					if _, err := w.Write(chunk); err != nil {
						return err
					}
				}
				return nil
			}, io.Discard)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Query: %v, want an error wrapping %v", err, tc.want)
			}
		})
	}
}
