package queryclient

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/skippr-dev/skippr/engine/lakequery"
	sdk "github.com/skippr-dev/skippr/plugin-sdk/lakequery"
)

// TestCallErr: the server's statuses come back as the errors the plugin path returns, so `skippr query`
// prints and exits the same way; only a server never reached is ErrUnreachable.
func TestCallErr(t *testing.T) {
	c := &Client{addr: "127.0.0.1:1"}
	for _, tc := range []struct {
		name    string
		err     error
		wrote   bool
		is      error
		message string
	}{
		{"bad SQL", status.Error(codes.InvalidArgument, "query failed: Binder Error: column nope"), false, sdk.ErrSQL, "query failed: Binder Error: column nope"},
		{"older server", status.Error(codes.InvalidArgument, "the defined request is invalid."), false, nil, "same release"},
		{"memory", status.Error(codes.ResourceExhausted, "too big"), false, sdk.ErrMemory, "too big"},
		{"unreachable", status.Error(codes.Unavailable, "connection refused"), false, ErrUnreachable, "connection refused"},
		{"gone midway", status.Error(codes.Unavailable, "reset"), true, nil, "Unavailable: reset"},
		{"token", status.Error(codes.Unauthenticated, "unknown token"), false, nil, "server_token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := c.callErr(tc.err, tc.wrote)
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("%v is not %v", err, tc.is)
			}
			if tc.is == nil && (errors.Is(err, ErrUnreachable) || errors.Is(err, sdk.ErrSQL)) {
				t.Fatalf("%v is ErrUnreachable or ErrSQL", err)
			}
			if !strings.Contains(err.Error(), tc.message) {
				t.Fatalf("%q does not contain %q", err, tc.message)
			}
		})
	}
}

func TestResultBody(t *testing.T) {
	msg := protowire.AppendTag(nil, 3, protowire.VarintType) // an unknown field first
	msg = protowire.AppendVarint(msg, 7)
	msg = protowire.AppendTag(msg, 1, protowire.BytesType)
	msg = protowire.AppendBytes(msg, []byte("id,name\n"))
	if got, err := resultBody(msg); err != nil || string(got) != "id,name\n" {
		t.Fatalf("resultBody = %q, %v", got, err)
	}
	if _, err := resultBody([]byte{0x0a, 0x05, 'a'}); err == nil {
		t.Fatal("a truncated message decoded")
	}
}

type runner struct{ calls int }

func (r *runner) Run(_ context.Context, req lakequery.Request, out io.Writer) (string, error) {
	r.calls++
	io.WriteString(out, "local:"+req.SQL)
	return "1 row", nil
}

// TestFallback: a server nobody listens on sends every statement to the plugins, opened once, and says why
// once.
func TestFallback(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cl, err := Dial(addr, "")
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	local := &runner{}
	var opened, warned int
	f := &Fallback{Server: cl,
		Open: func(context.Context) (lakequery.Runner, error) { opened++; return local, nil },
		Warn: func(err error) {
			warned++
			if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), addr) {
				t.Errorf("warning %v", err)
			}
		}}
	for i := 0; i < 2; i++ {
		var b strings.Builder
		if summary, err := f.Run(context.Background(), lakequery.Request{SQL: "SELECT 1"}, &b); err != nil || b.String() != "local:SELECT 1" || summary != "1 row" {
			t.Fatalf("Run = %q, %q, %v", b.String(), summary, err)
		}
	}
	if opened != 1 || warned != 1 || local.calls != 2 {
		t.Fatalf("opened %d, warned %d, local runs %d", opened, warned, local.calls)
	}
	if _, err := Dial("http://x:1", ""); err == nil {
		t.Fatal("Dial took an http:// address")
	}
}
