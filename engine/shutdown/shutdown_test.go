package shutdown

import (
	"context"
	"syscall"
	"testing"
	"time"
)

func TestSoftThenHard(t *testing.T) {
	for _, tc := range []struct {
		name   string
		grace  time.Duration
		second bool // send a second signal
		// wantHard: the context ends within a second of the last event.
	}{
		{name: "second signal stops at once", grace: time.Hour, second: true},
		{name: "grace period runs out", grace: 100 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, release := OnSignals(context.Background(), tc.grace, syscall.SIGUSR1)
			defer release()
			drain := Draining(ctx)
			select {
			case <-drain:
				t.Fatal("draining before any signal")
			default:
			}
			syscall.Kill(syscall.Getpid(), syscall.SIGUSR1)
			select {
			case <-drain:
			case <-time.After(10 * time.Second):
				t.Fatal("the first signal did not start draining")
			}
			if tc.second {
				select {
				case <-ctx.Done():
					t.Fatal("the first signal ended the context")
				case <-time.After(100 * time.Millisecond):
				}
				syscall.Kill(syscall.Getpid(), syscall.SIGUSR1)
			}
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("the context did not end")
			}
		})
	}
	if Draining(context.Background()) != nil {
		t.Fatal("a context without a soft stop must never drain")
	}
}
