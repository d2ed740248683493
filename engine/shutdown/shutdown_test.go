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

func TestChild(t *testing.T) {
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		case <-time.After(2 * time.Second):
			return false
		}
	}
	t.Run("own stop is soft, then hard after grace", func(t *testing.T) {
		ctx, stop, cancel := Child(context.Background(), 100*time.Millisecond)
		defer cancel()
		select {
		case <-Draining(ctx):
			t.Fatal("draining before stop")
		case <-time.After(50 * time.Millisecond):
		}
		stop()
		stop() // twice is harmless
		if !closed(Draining(ctx)) {
			t.Fatal("stop did not start draining")
		}
		if ctx.Err() != nil {
			t.Fatal("stop ended the context at once")
		}
		if !closed(ctx.Done()) {
			t.Fatal("the context did not end after the grace period")
		}
	})
	t.Run("the parent's soft stop reaches the child", func(t *testing.T) {
		parent, release := OnSignals(context.Background(), time.Hour, syscall.SIGUSR2)
		defer release()
		ctx, _, cancel := Child(parent, time.Hour)
		defer cancel()
		syscall.Kill(syscall.Getpid(), syscall.SIGUSR2)
		if !closed(Draining(ctx)) {
			t.Fatal("the parent's soft stop did not reach the child")
		}
	})
	t.Run("a sibling's stop does not", func(t *testing.T) {
		a, stopA, cancelA := Child(context.Background(), time.Hour)
		defer cancelA()
		b, _, cancelB := Child(context.Background(), time.Hour)
		defer cancelB()
		stopA()
		if !closed(Draining(a)) {
			t.Fatal("a not draining")
		}
		select {
		case <-Draining(b):
			t.Fatal("stopping a drained b")
		case <-time.After(100 * time.Millisecond):
		}
	})
}
