// Package shutdown turns stop signals into a soft stop, then a hard one. The first SIGTERM or SIGINT asks
// work to finish what is in flight and start nothing new (Draining); the context itself ends at a second
// signal or when the grace period runs out, and then everything stops at once. The WAL is the reason: a
// commit cut off halfway leaves its outcome unknown and the log refusing writes until it is reopened, and an
// apply cut off halfway is done again after the restart — both cost time a soft stop does not.
package shutdown

import (
	"context"
	"os"
	"os/signal"
	"sync"
	"time"
)

// DefaultGrace bounds a soft stop: long enough for an 8 MiB WAL commit and a destination's apply on a slow
// disk or S3, short enough for a supervisor's own stop timeout (systemd's default is 90 s).
const DefaultGrace = 30 * time.Second

type stop struct {
	soft  chan struct{}
	mu    sync.Mutex
	grace time.Duration
}

type key struct{}

// OnSignals returns a context that ends at the second of sigs, or grace after the first; Draining reports
// the first. Call release to stop listening.
func OnSignals(parent context.Context, grace time.Duration, sigs ...os.Signal) (ctx context.Context, release func()) {
	ctx, cancel := context.WithCancel(parent)
	s := &stop{soft: make(chan struct{}), grace: grace}
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, sigs...)
	go func() {
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
		close(s.soft)
		t := time.NewTimer(s.gracePeriod())
		defer t.Stop()
		select {
		case <-ch:
		case <-t.C:
		case <-ctx.Done():
		}
		cancel()
	}()
	return context.WithValue(ctx, key{}, s), func() { signal.Stop(ch); cancel() }
}

// SetGrace changes the grace period of ctx's soft stop (a command's --stop-timeout); it applies to a stop
// that has not begun yet.
func SetGrace(ctx context.Context, grace time.Duration) {
	if s, ok := ctx.Value(key{}).(*stop); ok && grace > 0 {
		s.mu.Lock()
		s.grace = grace
		s.mu.Unlock()
	}
}

func (s *stop) gracePeriod() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.grace
}

// Draining returns a channel closed when a soft stop begins, or nil (never ready) when ctx has no soft stop.
func Draining(ctx context.Context) <-chan struct{} {
	if s, ok := ctx.Value(key{}).(*stop); ok {
		return s.soft
	}
	return nil
}

// Child returns a context under parent with a soft stop of its own, for stopping one piece of work the way a
// signal stops all of them (fleet mode hands one pipeline to another worker): stop begins the soft stop —
// Draining(ctx) closes — and ctx ends grace later. A soft stop of parent begins one of ctx too, and parent's
// end ends ctx. Call stop or cancel when done with ctx.
func Child(parent context.Context, grace time.Duration) (context.Context, func(), context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	s := &stop{soft: make(chan struct{}), grace: grace}
	var once sync.Once
	begin := func() {
		once.Do(func() {
			close(s.soft)
			go func() {
				t := time.NewTimer(s.gracePeriod())
				defer t.Stop()
				select {
				case <-t.C:
				case <-ctx.Done():
				}
				cancel()
			}()
		})
	}
	go func() {
		select {
		case <-Draining(parent):
			begin()
		case <-ctx.Done():
		}
	}()
	return context.WithValue(ctx, key{}, s), begin, cancel
}
