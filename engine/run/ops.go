package run

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/skippr-dev/skippr/engine/config"
	"github.com/skippr-dev/skippr/engine/connector"
	"github.com/skippr-dev/skippr/engine/pipeline"
	"github.com/skippr-dev/skippr/engine/resnapshot"
	"github.com/skippr-dev/skippr/plugin-sdk/protocol"
)

// PipelineStatus is one pipeline's status on this host: the runner's last published status and its WAL.
type PipelineStatus struct {
	Pipeline string `json:"pipeline"`
	Running  bool   `json:"running"`
	// State is "failed" (stopped for good until a person acts), the runner's state while it runs ("running",
	// "retrying", "waiting", "backpressure", "apply paused"), or "stopped".
	State string `json:"state"`
	// Fault is why the pipeline failed or is retrying, with the fix.
	Fault *pipeline.Fault `json:"fault,omitempty"`
	// Live is the runner's last published status; nil when the pipeline never ran on this host.
	Live *pipeline.Status `json:"live,omitempty"`
	// WAL is read from the log itself, so it is right even when nothing runs.
	WAL struct {
		URL              string `json:"url"`
		Entries          int    `json:"entries"`
		Bytes            int64  `json:"bytes"`
		LastCommitted    uint64 `json:"last_committed"`
		ReclaimedThrough uint64 `json:"reclaimed_through"`
		Holder           string `json:"holder,omitempty"`
		Error            string `json:"error,omitempty"`
	} `json:"wal"`
}

// Status reads pipeline p's status from its state directory, the WAL's head and the running rule.
func Status(ctx context.Context, home string, p *config.Pipeline, log *slog.Logger) (PipelineStatus, error) {
	ps := PipelineStatus{Pipeline: p.Name, State: "stopped"}
	ps.WAL.URL = p.WAL.URL
	st, err := StateOf(home, p).ReadStatus()
	if err != nil {
		return ps, err
	}
	if st != nil {
		ps.Live, ps.Running, ps.Fault = st, Running(st), st.Fault
		if st.State == pipeline.StateFailed || ps.Running {
			ps.State = st.State
		}
	}
	if wl, err := OpenWAL(ctx, p, log, 0); err != nil {
		ps.WAL.Error = err.Error()
	} else if h, err := wl.Head(ctx); err != nil {
		ps.WAL.Error = err.Error()
	} else {
		ps.WAL.Entries, ps.WAL.Bytes, ps.WAL.LastCommitted, ps.WAL.ReclaimedThrough, ps.WAL.Holder = h.Entries, h.Bytes, h.LastSeq, h.ReclaimedThrough, h.Holder
	}
	return ps, nil
}

// Teardown asks pipeline p's source to release what it holds on its server and removes the pipeline's status;
// it refuses while the pipeline runs on this host. It returns what the source released.
func Teardown(ctx context.Context, home string, host connector.Starter, cfg *config.Config, p *config.Pipeline) ([]string, error) {
	state := StateOf(home, p)
	if st, err := state.ReadStatus(); err != nil {
		return nil, err
	} else if Running(st) {
		return nil, withCode(Refused, fmt.Errorf("pipeline %s is running (pid %d): stop it first", p.Name, st.PID))
	}
	cn, _ := cfg.Connection(p.Source)
	s, err := connector.Start(ctx, host, cn)
	if err != nil {
		return nil, err
	}
	defer s.Kill()
	released, err := s.Teardown(ctx, p.Name)
	if err != nil {
		return nil, err
	}
	state.RemoveStatus()
	return released, nil
}

// RequestResnapshot records a request to copy tables of pipeline p again, after asking its plugins whether
// they can: the source must offer a re-snapshot and the tables, every destination must apply one.
func RequestResnapshot(ctx context.Context, home string, host connector.Starter, cfg *config.Config, p *config.Pipeline, tables []string) ([]resnapshot.Request, error) {
	cn, _ := cfg.Connection(p.Source)
	s, err := connector.Start(ctx, host, cn)
	if err != nil {
		return nil, err
	}
	defer s.Kill()
	var source string // "connection (plugin name)" when the source cannot re-snapshot
	if !s.Spec.Offers(protocol.ServiceResnapshot) {
		source = fmt.Sprintf("%s (plugin %s)", cn.Name, s.Spec.Name)
	}
	streams, err := s.Discover(ctx)
	if err != nil {
		return nil, fmt.Errorf("pipeline %s: source %s: %w", p.Name, cn.Name, err)
	}
	var offered, lacking []string
	for _, st := range streams {
		offered = append(offered, st.Name)
	}
	for _, name := range p.Destinations {
		dc, _ := cfg.Connection(name)
		d, err := connector.Start(ctx, host, dc)
		if err != nil {
			return nil, err
		}
		caps, err := d.Capabilities(ctx)
		d.Kill()
		if err != nil {
			return nil, fmt.Errorf("pipeline %s: destination %s: %w", p.Name, name, err)
		}
		if !caps.Resnapshot {
			lacking = append(lacking, name)
		}
	}
	if err := resnapshot.Check(tables, offered, source, lacking); err != nil {
		return nil, withCode(Refused, fmt.Errorf("pipeline %s: %w", p.Name, err))
	}
	return StateOf(home, p).Resnapshots().Add(tables)
}

// Summary sums up what the pipelines did from their final status files (after a Once run that began at
// started).
func Summary(home string, pipes []*config.Pipeline, started time.Time) (pipeline.Summary, error) {
	var sts []pipeline.Status
	for _, p := range pipes {
		st, err := StateOf(home, p).ReadStatus()
		if err == nil && st == nil {
			err = fmt.Errorf("no status file %s", StateOf(home, p).StatusFile())
		}
		if err != nil {
			return pipeline.Summary{}, fmt.Errorf("summary of pipeline %s: %w", p.Name, err)
		}
		sts = append(sts, *st)
	}
	return pipeline.Summarize(sts, time.Since(started)), nil
}
