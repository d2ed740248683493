package run

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/skippr-dev/skippr/engine/config"
	"github.com/skippr-dev/skippr/engine/fleet"
	"github.com/skippr-dev/skippr/engine/metrics"
)

// All runs pipes side by side (Pipeline) until each has stopped; the error joins theirs, or is the one error
// when only one failed.
func (r *Runner) All(ctx context.Context, pipes []*config.Pipeline, waitLock bool) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, p := range pipes {
		wg.Go(func() {
			if err := r.Pipeline(ctx, p, waitLock, 0); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}

// FleetPipelines checks that every pipeline can move between workers (fleet.CheckPlacement) and returns them
// for the assignment. The error names every pipeline refused, at its WAL's place in the config, and is Refused.
func FleetPipelines(pipes []*config.Pipeline) ([]fleet.Pipeline, error) {
	var out []fleet.Pipeline
	var errs []error
	for _, p := range pipes {
		if err := fleet.CheckPlacement(p.Name, p.WAL.URL, p.Fleet.Pin); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p.WAL.Pos, err))
		}
		out = append(out, fleet.Pipeline{Name: p.Name, Pin: p.Fleet.Pin})
	}
	if len(errs) > 0 {
		return nil, withCode(Refused, errors.Join(errs...))
	}
	return out, nil
}

// FleetProgress is a fleet.Worker's Progress: what this process's metrics know of a pipeline's lag.
func FleetProgress(reg *metrics.Registry) func(name string) (fleet.Progress, bool) {
	return func(name string) (fleet.Progress, bool) {
		l, ok := reg.Pipeline(name).Lag()
		return fleet.Progress{Committed: l.Committed, Applied: l.Applied, UnappliedBytes: l.UnappliedBytes,
			OldestUnapplied: l.Oldest, Started: l.Started, FirstApply: l.FirstApply}, ok
	}
}
