package fault

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestRoundTripThroughStatus(t *testing.T) {
	for _, tc := range []struct {
		name     string
		err      error
		class    Class
		sentinel error
		fix      string
		code     codes.Code
	}{
		{"config", ConfigErr(errors.New("password authentication failed"), "set settings.password"), Config, ErrConfig, "set settings.password", codes.FailedPrecondition},
		{"data wrapped", fmt.Errorf("apply 7: %w", DataErr(errors.New("NaN in numeric(10,2)"), "set on_unrepresentable")), Data, ErrData, "set on_unrepresentable", codes.InvalidArgument},
		{"resnapshot", ResnapshotErr(errors.New("slot orders was dropped"), "re-snapshot"), Resnapshot, ErrResnapshot, "re-snapshot", codes.DataLoss},
		{"transient", TransientErr(errors.New("connection reset")), Transient, ErrTransient, "", codes.Unavailable},
		{"unclassified", errors.New("boom"), Unknown, nil, "", codes.Unknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wire := ToStatus(tc.err)
			st, ok := status.FromError(wire)
			if !ok || st.Code() != tc.code || st.Message() != tc.err.Error() {
				t.Fatalf("status = %v (%v), want code %v and message %q", st, ok, tc.code, tc.err.Error())
			}
			back := FromStatus(st)
			if back.Error() != tc.err.Error() {
				t.Errorf("message %q, want %q", back.Error(), tc.err.Error())
			}
			if got := ClassOf(back); got != tc.class {
				t.Errorf("class %v, want %v", got, tc.class)
			}
			if tc.sentinel != nil && !errors.Is(fmt.Errorf("engine: %w", back), tc.sentinel) {
				t.Errorf("errors.Is(%v) is false", tc.sentinel)
			}
			for _, other := range []error{ErrTransient, ErrConfig, ErrData, ErrResnapshot} {
				if other != tc.sentinel && errors.Is(back, other) {
					t.Errorf("matches %v too", other)
				}
			}
			if FixOf(back) != tc.fix {
				t.Errorf("fix %q, want %q", FixOf(back), tc.fix)
			}
			if ClassOf(back).Permanent() != (tc.class == Config || tc.class == Data || tc.class == Resnapshot) {
				t.Errorf("Permanent() wrong for %v", tc.class)
			}
		})
	}
}

func TestUnclassifiedCodes(t *testing.T) {
	for code, want := range map[codes.Code]Class{
		codes.Unavailable: Transient, codes.Aborted: Transient, codes.DeadlineExceeded: Transient,
		codes.Internal: Unknown, codes.InvalidArgument: Unknown, codes.Unknown: Unknown,
	} {
		if got := ClassOf(FromStatus(status.New(code, "x"))); got != want {
			t.Errorf("%v: class %v, want %v", code, got, want)
		}
	}
	if FromStatus(status.New(codes.OK, "")) != nil {
		t.Error("OK status is an error")
	}
	if ClassOf(fmt.Errorf("x: %w", context.Canceled)) != Transient {
		t.Error("cancellation is not transient")
	}
	if st, _ := status.FromError(ToStatus(context.DeadlineExceeded)); st.Code() != codes.DeadlineExceeded {
		t.Errorf("deadline became %v", st.Code())
	}
	if New(Config, nil, "x") != nil {
		t.Error("New(nil) is not nil")
	}
}
