// Package supervise runs one pipeline until it ends: it restarts the pipeline after errors a retry can fix and
// stops it, in a state a person can read (`failed`, the message, the class, the fix, the time), after errors that
// need a person.
//
// The decision is made by sentinel only (errors.Is / fault.ClassOf), never by message text:
//
//   - a plugin's fault.ErrConfig, ErrData, ErrResnapshot, and the engine's own permanent errors
//     (pipeline.ErrGuarantee, ErrLogBehind, ErrDestinationReset; wal.ErrCorrupt, ErrMissing, ErrFenced, and
//     ErrLocked unless waiting for the lock) stop the pipeline at once;
//   - everything else (fault.ErrTransient and unclassified errors) is retried with backoff from the last
//     durable point, reported as state `retrying` with the attempt count and the last error. With Once, a run
//     of MaxAttemptsOnce consecutive attempts that made no progress ends as `failed` too: a one-shot run (cron,
//     CI) must end, and the next one starts over anyway.
package supervise

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/skippr-dev/skippr/engine/pipeline"
	"github.com/skippr-dev/skippr/engine/wal"
	"github.com/skippr-dev/skippr/plugin-sdk/fault"
)

// Config is one supervised pipeline.
type Config struct {
	Name string
	// Run runs the pipeline once, from the last durable point, until it ends or fails.
	Run func(ctx context.Context) error
	// Once: a run that returns nil is the end; retries are bounded by MaxAttemptsOnce.
	Once bool
	// WaitLock treats wal.ErrLocked as "wait for the holder's lease to expire" instead of a failure.
	WaitLock bool
	// Progress returns a number that grows whenever the pipeline commits or applies an entry; a run that moved
	// it resets the count of consecutive failed attempts.
	Progress func() uint64
	// Permanent reports errors the caller knows a retry cannot fix (bad arguments, a plugin that is not
	// installed); they fail as fault.Config.
	Permanent func(error) bool
	// OnFault receives the state when the pipeline starts retrying, waits for the lock, or fails.
	OnFault func(state string, f pipeline.Fault)
	Logger  *slog.Logger

	MinBackoff, MaxBackoff time.Duration
	// MaxAttemptsOnce bounds consecutive attempts without progress under Once.
	MaxAttemptsOnce int
}

// Defaults. Five attempts with backoff from 0.5 s doubling span about 15 s: long enough to ride over a plugin
// crash, a server restart or a network blip, short enough that `sync --once` under cron or CI reports an
// outage instead of hanging in it (the next run retries from the same durable point).
const (
	DefaultMinBackoff      = 500 * time.Millisecond
	DefaultMaxBackoff      = 30 * time.Second
	DefaultMaxAttemptsOnce = 5
	// healthyRunTime: a run that lasted this long resets the backoff even without a progress signal.
	healthyRunTime = time.Minute
)

// Failed is the error Run returns when the pipeline stopped for good. It unwraps to the cause.
type Failed struct {
	Pipeline string
	Class    fault.Class
	Fix      string
	Err      error
}

func (f *Failed) Error() string {
	msg := fmt.Sprintf("pipeline %s failed (%s): %v", f.Pipeline, f.Class, f.Err)
	if f.Fix != "" {
		msg += "\n  fix: " + f.Fix
	}
	return msg
}

func (f *Failed) Unwrap() error { return f.Err }

// Classify returns the class of err and the fix for it: the plugin's own when it sent one, the engine's for its
// permanent errors. waitLock makes wal.ErrLocked transient.
func Classify(err error, waitLock bool) (fault.Class, string) {
	switch {
	case errors.Is(err, fault.ErrConfig), errors.Is(err, fault.ErrData), errors.Is(err, fault.ErrResnapshot):
		return fault.ClassOf(err), fault.FixOf(err)
	case errors.Is(err, wal.ErrLocked):
		if waitLock {
			return fault.Transient, ""
		}
		return fault.Config, "stop the other skippr writing to this WAL, or run `skippr sync --wait-lock` to take over once its lease expires"
	case errors.Is(err, wal.ErrFenced):
		return fault.Config, "another skippr took over this WAL: run only one `skippr sync` per pipeline"
	case errors.Is(err, pipeline.ErrGuarantee):
		return fault.Config, "set `delivery: at-least-once` on the pipeline, or use a destination that records applied sequence numbers"
	case errors.Is(err, pipeline.ErrLogBehind):
		return fault.Config, "point the pipeline's wal.url at its own WAL, or give the pipeline a new name to fill the destination again"
	case errors.Is(err, pipeline.ErrDestinationReset):
		return fault.Resnapshot, "give the pipeline a new name (and a new wal.url) and run `skippr sync`: the source copies its tables again"
	case errors.Is(err, wal.ErrCorrupt), errors.Is(err, wal.ErrMissing):
		return fault.Resnapshot, "re-snapshot the affected tables: `skippr wal inspect URL` lists the bad entries; run `skippr teardown PIPELINE`, " +
			"give the pipeline a new name and a new wal.url, and run `skippr sync` (the source copies its tables again and the destination upserts them by key)"
	}
	return fault.ClassOf(err), fault.FixOf(err)
}

// Run runs the pipeline until it ends (Once), ctx ends (returns nil), or it fails for good (returns *Failed).
func Run(ctx context.Context, cfg Config) error {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	minB, maxB := cfg.MinBackoff, cfg.MaxBackoff
	if minB <= 0 {
		minB = DefaultMinBackoff
	}
	if maxB <= 0 {
		maxB = DefaultMaxBackoff
	}
	maxAttempts := cfg.MaxAttemptsOnce
	if maxAttempts <= 0 {
		maxAttempts = DefaultMaxAttemptsOnce
	}
	progress := cfg.Progress
	if progress == nil {
		progress = func() uint64 { return 0 }
	}
	onFault := cfg.OnFault
	if onFault == nil {
		onFault = func(string, pipeline.Fault) {}
	}

	backoff := minB
	stalled := 0 // consecutive failed attempts without progress
	var since time.Time
	for {
		started, before := time.Now(), progress()
		err := cfg.Run(ctx)
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			log.Info("stopped")
			return nil
		}
		if progress() != before || time.Since(started) > healthyRunTime {
			backoff, stalled, since = minB, 0, time.Time{}
		}
		if since.IsZero() {
			since = time.Now()
		}
		class, fix := Classify(err, cfg.WaitLock)
		waiting := cfg.WaitLock && errors.Is(err, wal.ErrLocked)
		if class.Permanent() || (!waiting && cfg.Permanent != nil && cfg.Permanent(err)) {
			if !class.Permanent() {
				class = fault.Config
			}
			return fail(log, onFault, cfg.Name, err, class, fix, time.Now())
		}
		if waiting {
			// Waiting for a crashed holder's lease is the point of --wait-lock, not a failure.
			log.Info("waiting for the WAL's lease to expire", "holder", err.Error(), "retry_in", backoff)
			onFault(pipeline.StateWaiting, pipeline.Fault{Message: err.Error(), Class: fault.Transient.String(), Since: since})
		} else {
			stalled++
			if cfg.Once && stalled >= maxAttempts {
				if fix == "" {
					fix = fmt.Sprintf("the error persisted over %d attempts without progress: remove its cause and run again, or run `skippr sync` without --once to keep retrying", stalled)
				}
				return fail(log, onFault, cfg.Name, err, class, fix, since)
			}
			log.Error("pipeline failed; restarting from the last durable point", "err", err, "class", class, "attempt", stalled, "backoff", backoff)
			onFault(pipeline.StateRetrying, pipeline.Fault{Message: err.Error(), Class: class.String(), Since: since, Attempt: stalled})
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, maxB)
	}
}

func fail(log *slog.Logger, onFault func(string, pipeline.Fault), name string, err error, class fault.Class, fix string, since time.Time) error {
	f := pipeline.Fault{Message: err.Error(), Class: class.String(), Fix: fix, Since: since}
	var ee *pipeline.EntryError
	if errors.As(err, &ee) {
		f.Entry, f.Segment = ee.Seq, ee.Segment
	}
	log.Error("pipeline failed; it needs a person", "err", err, "class", class, "fix", fix)
	onFault(pipeline.StateFailed, f)
	return &Failed{Pipeline: name, Class: class, Fix: fix, Err: err}
}
