package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	pluginv2 "github.com/skippr-dev/skippr/plugin-sdk/proto/skippr/plugin/v2"
)

// checkDest fails its Check with err and reports unsupported types.
type checkDest struct {
	plainDest
	err error
}

func (d *checkDest) Check(context.Context, json.RawMessage) error { return d.err }
func (d *checkDest) UnsupportedTypes() []string                   { return []string{"decimal256", "dense_union"} }

// A failed check keeps its class across the boundary: a transient one must not look like a failed check (the
// engine would refuse the pipeline for a server that is merely restarting), a config one keeps its fix.
func TestCheckCarriesClass(t *testing.T) {
	for _, tc := range []struct {
		name     string
		err      error
		code     codes.Code // codes.OK: an answer with ok=false
		fix      string
		wantText string
	}{
		{"unclassified", errors.New("dir is not writable"), codes.OK, "", "dir is not writable"},
		{"config", fault.ConfigErr(errors.New("wrong password"), "set the password"), codes.FailedPrecondition, "set the password", "wrong password"},
		{"transient", fault.TransientErr(errors.New("server starting up")), codes.Unavailable, "", "server starting up"},
		{"unclassified but unreachable", fmt.Errorf("connect: %w", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}), codes.Unavailable, "", "connect: dial tcp: connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := startServer(t, &checkDest{err: tc.err}, memory.DefaultAllocator)
			r, err := c.Check(context.Background(), &pluginv2.CheckRequest{})
			if tc.code == codes.OK {
				if err != nil || r.Ok || r.Error != tc.wantText {
					t.Fatalf("check = %v, %v; want ok=false with %q", r, err, tc.wantText)
				}
				return
			}
			st, _ := status.FromError(err)
			if st.Code() != tc.code || st.Message() != tc.wantText {
				t.Fatalf("check = %v, %v; want status %v %q", r, err, tc.code, tc.wantText)
			}
			back := fault.FromStatus(st)
			if fault.FixOf(back) != tc.fix {
				t.Errorf("fix %q, want %q", fault.FixOf(back), tc.fix)
			}
		})
	}
}

func TestCapabilitiesCarryUnsupportedTypes(t *testing.T) {
	c := startServer(t, &checkDest{}, memory.DefaultAllocator)
	r, err := c.Capabilities(context.Background(), &pluginv2.CapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got := r.UnsupportedTypes; len(got) != 2 || got[0] != "decimal256" || got[1] != "dense_union" {
		t.Fatalf("unsupported types %v", got)
	}
}

// proposingDest proposes apply limits.
type proposingDest struct {
	plainDest
	defaults ApplyDefaults
}

func (d *proposingDest) Capabilities(context.Context, json.RawMessage) (Capabilities, error) {
	return Capabilities{Coalesce: true, ApplyDefaults: d.defaults}, nil
}

// A proposal crosses the boundary in milliseconds, and no proposal stays absent, so the engine can tell a
// destination that proposes nothing from one that proposes zero.
func TestCapabilitiesCarryApplyDefaults(t *testing.T) {
	for _, tc := range []struct {
		name     string
		defaults ApplyDefaults
		want     *pluginv2.ApplyDefaults
	}{
		{"none", ApplyDefaults{}, nil},
		{"interval", ApplyDefaults{MaxInterval: time.Minute}, &pluginv2.ApplyDefaults{MaxIntervalMs: 60000}},
		{"all three", ApplyDefaults{MaxInterval: 1500 * time.Microsecond, MaxBytes: 1 << 30, MaxEntries: 100}, &pluginv2.ApplyDefaults{MaxIntervalMs: 1, MaxBytes: 1 << 30, MaxEntries: 100}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := startServer(t, &proposingDest{defaults: tc.defaults}, memory.DefaultAllocator)
			r, err := c.Capabilities(context.Background(), &pluginv2.CapabilitiesRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(r.ApplyDefaults, tc.want) {
				t.Fatalf("apply defaults %v, want %v", r.ApplyDefaults, tc.want)
			}
		})
	}
}
