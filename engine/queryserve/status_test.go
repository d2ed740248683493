package queryserve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/skippr-dev/skippr/engine/lakequery"
	sdk "github.com/skippr-dev/skippr/plugin-sdk/lakequery"
)

// failing is a Querier whose every statement fails with err before its first byte.
type failing struct{ err error }

func (f failing) Run(context.Context, lakequery.Request, io.Writer) (string, error) { return "", f.err }

// TestStatementErrorCodes: the code a client gets tells it what to do — fix the SQL, ask for less, retry (the
// WAL moved under the statement), or report a fault.
func TestStatementErrorCodes(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		code codes.Code
		says string
	}{
		{"bad SQL", fmt.Errorf("no table nope: %w", sdk.ErrSQL), codes.InvalidArgument, "nope"},
		{"memory", fmt.Errorf("out of memory: %w", sdk.ErrMemory), codes.ResourceExhausted, "--query-memory"},
		{"WAL reclaimed under it", fmt.Errorf("pipeline p: wal entries 3 through 9 were reclaimed: %w", lakequery.ErrRetry), codes.Unavailable, "retry the query"},
		{"anything else", errors.New("wal entry 4: segment s: not found"), codes.Internal, "not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(Options{Querier: failing{tc.err}, Log: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			_, _, err = s.query(context.Background(), "SELECT 1")
			if status.Code(err) != tc.code || !strings.Contains(status.Convert(err).Message(), tc.says) {
				t.Fatalf("%v: got %s %q, want %s saying %q", tc.err, status.Code(err), status.Convert(err).Message(), tc.code, tc.says)
			}
		})
	}
}
