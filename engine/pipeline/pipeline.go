// Package pipeline runs the commit protocol of one pipeline:
//
//	source Read → group commit into the WAL → Ack the source → per destination: Apply each sequence number → reclaim
//
// A destination whose capabilities say coalesce gets, when it is behind, every committed entry it lacks up to
// its ApplyLimits as one apply of the range first..last, streamed one segment at a time; it records last as
// what it holds, atomically with the data, and skips the entries of a replayed range it holds already. One
// without coalesce gets one entry per apply. The apply loops take the commit records the runner holds (it
// listed them at start and added each entry it committed) and read each segment once for all destinations
// through a small bounded cache (segments.go). Reclaim runs beside the apply loops and deletes what the
// slowest destination applied.
//
// The only state that matters across a crash lives in the WAL (entries and the source checkpoint each covers)
// and in each destination (the highest sequence number it applied, committed atomically with the data). Run
// reconstructs everything else from those two at start, which is why a SIGKILL anywhere is just a restart.
//
// The runner speaks to its plugins through Source and Destination, in types of its own (plugin.go): batches as
// Arrow IPC bytes, checkpoints, capabilities, apply results. engine/connector adapts the plugin protocol to
// them, so nothing here changes with a protocol version.
//
// # The commit loop and its crash points
//
// One Read of the source is a commitLoop (read.go): one run loop whose cases each call a step — read (take a
// message from the source stream), groupCommit (segment and commit record, beside the reading), ack (the
// source, after the commit record), commitDone (hand the entry to the apply loops) — with the state in the
// struct. Each destination's applyLoop calls apply (one range, then advance); reclaim runs beside them. A
// binary built with the failpoints tag can stop at the named points between these steps (engine/failpoint
// holds the list and how to arm them):
//
//	wal.after-segment         segment durable, no commit record          (wal.Log.Commit)
//	pipeline.after-commit     commit record durable, source not acked    (runner.commit)
//	pipeline.after-ack        source acked, entry not yet handed on       (runner.ack)
//	pipeline.apply-sent       a range sent to a destination, not ended    (runner.applyRange)
//	pipeline.after-apply      a destination committed, not yet recorded   (runner.apply)
//	wal.after-reclaim-record  reclaim recorded, nothing deleted yet       (wal.Log.Reclaim)
//
// A crash at each of them loses nothing and applies nothing twice (cmd/skippr's TestCrashPoints).
package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/skippr-dev/skippr/engine/wal"
)

// Log is what the runner needs of the WAL.
type Log interface {
	Head(ctx context.Context) (wal.Head, error)
	Commit(ctx context.Context, frames []wal.Frame, checkpoint []byte) (wal.CommitRecord, error)
	Entries(ctx context.Context, after uint64) ([]wal.CommitRecord, error)
	ReadSegment(ctx context.Context, rec wal.CommitRecord) ([]wal.Frame, error)
	Reclaim(ctx context.Context, upTo uint64) error
	URL() string
}

// Endpoint is a connection in use by the pipeline.
type Endpoint[T any] struct {
	Name   string // the connection's name in the config
	Plugin T      // holds the connection's settings
	// Apply bounds one apply of a destination that coalesces; unused for a source.
	Apply ApplyLimits
	// PluginName is the plugin's name, for messages ("" names the connection instead).
	PluginName string
}

// ApplyLimits bound a coalesced apply: a destination whose capabilities say coalesce and that is behind gets
// every committed entry it lacks, up to MaxBytes of WAL segments and MaxEntries entries, as one apply. A
// destination without coalesce gets one entry per apply whatever these say.
type ApplyLimits struct {
	// MaxInterval: once caught up, the next apply waits until this long after the last one began, unless the
	// entries waiting fill MaxBytes or MaxEntries first (or the source is held back by them, or a --once run
	// is finishing). 0 applies each entry as soon as it is committed.
	MaxInterval time.Duration
	// MaxBytes of WAL entries in one apply; the first entry goes even when it alone is larger. 0 means
	// DefaultApplyMaxBytes.
	MaxBytes int64
	// MaxEntries in one apply; 0 is no limit.
	MaxEntries int
	// Unset: the limits the connection leaves out. Each takes the destination's proposal
	// (Capabilities.ApplyDefaults) when it makes one, else the value above; a limit not in Unset is
	// as given, 0 included.
	Unset ApplyKeys
}

// DefaultApplyMaxBytes: 32 entries of the default 8 MiB, so a lake destination catching up writes large files
// and one snapshot per 256 MiB instead of one per entry (Postgres → Iceberg spent half its time in per-entry
// snapshots, issue #14), while one range stays far below the 1 GiB the WAL holds unapplied by default.
const DefaultApplyMaxBytes = 256 << 20

// Config is one pipeline run.
type Config struct {
	Name         string
	Source       Endpoint[Source]
	Streams      []string
	Destinations []Endpoint[Destination]
	Log          Log
	// ExactlyOnce refuses to start unless every destination can honour it.
	ExactlyOnce bool
	// SourceTruncates: the source sends truncates (SourceTruncates), so every destination must apply them.
	SourceTruncates bool
	// Group commit: a commit starts whenever frames up to a source checkpoint are waiting and no commit is in
	// flight. While one is in flight the next entry gathers, for at most MaxBatchBytes of frames or MaxDelay
	// since its first frame; then the reader waits for the commit.
	MaxBatchBytes int64
	MaxDelay      time.Duration
	// MaxUnappliedBytes stops reading the source while the WAL holds more than this, unapplied.
	MaxUnappliedBytes int64
	// ReadCacheBytes bounds the segments kept for destinations that have not applied them yet, so each
	// segment is read once for all destinations (segments.go). 0 means DefaultReadCacheBytes; below 0, every
	// destination reads every segment itself.
	ReadCacheBytes int64
	// ApplyPaused keeps committed entries in the WAL without applying them.
	ApplyPaused bool
	// Once returns nil when the source is idle and every destination has applied everything.
	Once   bool
	Logger *slog.Logger
	// OnStatus, if set, receives a snapshot whenever the status changes (at most every StatusEvery).
	OnStatus    func(Status)
	StatusEvery time.Duration
	// Observer, if set, sees reads, commits and applies as they happen.
	Observer Observer
	// Resnapshots, if set, holds `skippr resnapshot` requests, polled every ResnapshotPoll: a new one restarts
	// the source's Read from the last durable checkpoint with the streams to copy again (resnapshot.go).
	Resnapshots    Resnapshots
	ResnapshotPoll time.Duration
	// SourceResnapshots: the source offers protocol.ServiceResnapshot. Without it each request is refused at
	// once (status "refused", naming SourcePlugin) instead of waiting for a copy that never starts.
	SourceResnapshots bool
	SourcePlugin      string // the source's plugin name, for messages
}

// Defaults chosen by measurement (BENCHMARKS.md): 8 MiB entries amortise an fsync (local) or two PUTs (S3)
// while keeping commit latency around the delay bound.
const (
	DefaultMaxBatchBytes     = 8 << 20
	DefaultMaxDelay          = 200 * time.Millisecond
	DefaultMaxUnappliedBytes = 1 << 30
)

// ErrGuarantee is returned when a destination cannot honour the pipeline's delivery guarantee.
var ErrGuarantee = errors.New("delivery guarantee cannot be honoured")

// ErrLogBehind is returned when a destination holds sequence numbers the WAL does not know: the log was lost
// or belongs to another pipeline, and carrying on would skip new data as "already applied".
var ErrLogBehind = errors.New("destination is ahead of the WAL")

// ErrDestinationReset is returned when an exactly-once destination has applied less than the WAL still holds:
// it was reset or is new, and the entries it lacks are gone from the log, so only a fresh pipeline fills it.
var ErrDestinationReset = errors.New("destination needs entries the WAL reclaimed")

type runner struct {
	cfg Config
	log *slog.Logger

	mu           sync.Mutex
	changed      chan struct{} // closed and replaced whenever committed or applied moves
	stopApply    chan struct{} // closed at a soft stop: apply loops finish their Apply and return
	reclaimDue   chan struct{} // a destination moved: reclaim what all applied (buffered, 1)
	committedSeq uint64
	reclaimed    uint64
	applied      []uint64
	coalesce     []bool                      // per destination: it takes a range of entries in one apply
	flush        bool                        // a --once run is finishing: no apply waits for its max_interval
	records      map[uint64]wal.CommitRecord // live entries (without checkpoints): what the apply loops apply, WAL depth and backpressure
	segments     *segmentCache
	status       Status
	lastStatus   time.Time
	trailing     *time.Timer    // a held-back publish is due (status.go); nil: none
	trailingBusy sync.WaitGroup // held-back publishes sending now
	statusFinal  bool           // the stopped status is being sent: nothing else is
	caps         []Capabilities // per destination
	renameless   []string       // destinations without Capabilities.RenamedStream (rename.go)
	fromPlugin   [][]string     // per destination: the apply limits its plugin proposed
	lastCP       []byte         // the source checkpoint of the last committed entry
}

// Run runs the pipeline until ctx ends, an error occurs, or (with Once) it has caught up.
func Run(ctx context.Context, cfg Config) error {
	if cfg.MaxBatchBytes <= 0 {
		cfg.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if cfg.MaxDelay <= 0 {
		cfg.MaxDelay = DefaultMaxDelay
	}
	if cfg.MaxUnappliedBytes <= 0 {
		cfg.MaxUnappliedBytes = DefaultMaxUnappliedBytes
	}
	if cfg.StatusEvery <= 0 {
		cfg.StatusEvery = time.Second
	}
	if cfg.Observer == nil {
		cfg.Observer = noObserver{}
	}
	// start resolves each destination's apply limits in place.
	cfg.Destinations = slices.Clone(cfg.Destinations)
	if cfg.ReadCacheBytes == 0 {
		cfg.ReadCacheBytes = DefaultReadCacheBytes
	}
	if cfg.ResnapshotPoll <= 0 {
		cfg.ResnapshotPoll = DefaultResnapshotPoll
	}
	lg := cfg.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	r := &runner{cfg: cfg, log: lg, changed: make(chan struct{}), stopApply: make(chan struct{}), reclaimDue: make(chan struct{}, 1), records: map[uint64]wal.CommitRecord{}}
	r.segments = newSegmentCache(cfg.Log, cfg.ReadCacheBytes)
	defer r.endHeldBack()
	head, err := r.start(ctx)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg, reclaimer sync.WaitGroup
	defer reclaimer.Wait()
	if !cfg.ApplyPaused {
		reclaimer.Add(1)
		go func() {
			defer reclaimer.Done()
			if err := r.reclaimLoop(ctx); err != nil {
				cancel(err)
			}
		}()
		for i := range cfg.Destinations {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := r.applyLoop(ctx, i); err != nil {
					cancel(err)
				}
			}()
		}
	}
	err = r.readLoop(ctx, head.LastCheckpoint)
	switch {
	case errors.Is(err, errStopped):
		// Soft stop: each apply loop finishes the Apply it is in and starts no other; only then end ctx.
		close(r.stopApply)
		wg.Wait()
		err = nil
		cancel(errDone)
	case err != nil:
		cancel(err)
	default:
		cancel(errDone)
	}
	wg.Wait()
	r.publishFinal()
	if err == nil || errors.Is(err, errDone) {
		return nil
	}
	// The first error ended the run and is its cause; a read ended by it reports only the cancellation, and not
	// always as context.Canceled: a plugin's stream cancelled under it comes back as the gRPC status Canceled,
	// which does not unwrap to it (seen under load: "datagen read: context canceled" hid a corrupt segment).
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, errDone) {
		return cause
	}
	return err
}

var (
	errDone    = errors.New("pipeline caught up")
	errStopped = errors.New("pipeline stopped on request")
)

// start checks guarantees and reconstructs the applied points.
func (r *runner) start(ctx context.Context) (wal.Head, error) {
	cfg := r.cfg
	r.coalesce = make([]bool, len(cfg.Destinations))
	for i, d := range cfg.Destinations {
		caps, err := d.Plugin.Capabilities(ctx)
		if err != nil {
			return wal.Head{}, fmt.Errorf("pipeline %s: destination %s: %w", cfg.Name, d.Name, err)
		}
		r.caps = append(r.caps, caps)
		if cfg.ExactlyOnce && !caps.ExactlyOnce {
			note := caps.ExactlyOnceNote
			if note == "" {
				note = "it does not record applied sequence numbers"
			}
			return wal.Head{}, fmt.Errorf("pipeline %s asks for exactly-once, but destination %s cannot honour it (%s); set `delivery: at-least-once` to accept duplicates after a crash: %w", cfg.Name, d.Name, note, ErrGuarantee)
		}
		if cfg.SourceTruncates && !caps.Truncate {
			return wal.Head{}, fmt.Errorf("pipeline %s: source %s propagates TRUNCATE, but destination %s cannot apply a truncate; set the source's `truncate: error` (stop at a TRUNCATE) or `truncate: ignore` (keep the rows): %w", cfg.Name, cfg.Source.Name, d.Name, ErrGuarantee)
		}
		r.coalesce[i] = caps.Coalesce
		if !caps.RenamedStream {
			r.renameless = append(r.renameless, d.Name)
		}
		lim, taken := resolveApply(d.Apply, proposalOf(caps.ApplyDefaults))
		cfg.Destinations[i].Apply = lim
		if !caps.Coalesce {
			taken = nil // one entry per apply: no limit applies, so none is worth a line
		}
		r.fromPlugin = append(r.fromPlugin, taken)
		if len(taken) > 0 {
			r.log.Info(proposalMessage(d, lim, taken), "destination", d.Name)
		}
	}
	head, err := cfg.Log.Head(ctx)
	if err != nil {
		return head, fmt.Errorf("pipeline %s: %w", cfg.Name, err)
	}
	r.committedSeq, r.reclaimed, r.lastCP = head.LastSeq, head.ReclaimedThrough, head.LastCheckpoint
	entries, err := cfg.Log.Entries(ctx, head.ReclaimedThrough)
	if err != nil {
		return head, fmt.Errorf("pipeline %s: %w", cfg.Name, err)
	}
	for _, e := range entries {
		r.keep(e)
	}
	r.applied = make([]uint64, len(cfg.Destinations))
	for i, d := range cfg.Destinations {
		la, err := d.Plugin.LastApplied(ctx, cfg.Name)
		if err != nil {
			return head, fmt.Errorf("pipeline %s: destination %s: %w", cfg.Name, d.Name, err)
		}
		switch {
		case la > head.LastSeq:
			return head, fmt.Errorf("pipeline %s: destination %s has applied up to WAL sequence %d, but the WAL at %s ends at %d (lost, reset, or another pipeline's log?): %w",
				cfg.Name, d.Name, la, cfg.Log.URL(), head.LastSeq, ErrLogBehind)
		case la < head.ReclaimedThrough && cfg.ExactlyOnce:
			return head, fmt.Errorf("pipeline %s: destination %s has applied up to WAL sequence %d, but the WAL at %s reclaimed entries through %d: the destination was reset or is new; it needs a fresh pipeline (a new name) to be filled again: %w",
				cfg.Name, d.Name, la, cfg.Log.URL(), head.ReclaimedThrough, ErrDestinationReset)
		}
		// An at-least-once destination records nothing: start it where the log starts.
		r.applied[i] = max(la, head.ReclaimedThrough)
		r.log.Info("destination resumes", "destination", d.Name, "applied", r.applied[i], "committed", head.LastSeq)
	}
	applied := map[string]uint64{}
	for i, d := range cfg.Destinations {
		applied[d.Name] = r.applied[i]
	}
	cfg.Observer.Started(entries, applied)
	r.status = Status{Pipeline: cfg.Name, PID: os.Getpid(), State: "running", WAL: WALStatus{URL: cfg.Log.URL()}}
	if cfg.ApplyPaused {
		r.status.State = "apply paused"
	}
	return head, nil
}

// notify wakes everyone waiting on progress. Callers hold r.mu.
func (r *runner) notify() {
	close(r.changed)
	r.changed = make(chan struct{})
}

func (r *runner) minApplied() uint64 {
	if len(r.applied) == 0 || r.cfg.ApplyPaused {
		// Without destinations applying, nothing may be reclaimed.
		return r.reclaimed
	}
	m := r.applied[0]
	for _, a := range r.applied[1:] {
		m = min(m, a)
	}
	return m
}

// unappliedBytes is what backpressure bounds: entries some destination still needs. Callers hold r.mu.
func (r *runner) unappliedBytes() int64 {
	lo := r.minApplied()
	var n int64
	for seq, rec := range r.records {
		if seq > lo {
			n += rec.Size
		}
	}
	return n
}

// keep holds rec for the apply loops. Callers hold r.mu, or are alone.
func (r *runner) keep(rec wal.CommitRecord) {
	rec.Checkpoint = nil // the apply path never needs it, and a source may keep its schemas in it
	r.records[rec.Seq] = rec
}
