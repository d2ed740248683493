package wal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skippr-dev/skippr/engine/failpoint"
)

// Options configures a Log.
type Options struct {
	// Owner names this writer in the lease and in ErrLocked messages; default host:pid.
	Owner string
	// LeaseTTL is the S3 lease duration; default 30s. It is renewed every TTL/3
	// and a writer stops committing TTL/4 before its lease would expire.
	LeaseTTL time.Duration
	S3       S3Options
	Logger   *slog.Logger
	// Epoch, when not 0, is the writer epoch chosen by an outside election (fleet mode: the etcd election's
	// revision) instead of the stored epoch plus one. Acquire on S3 then refuses with ErrFenced when Epoch is
	// lower than the stored epoch (a newer holder was elected), and takes over a live lease only when Epoch
	// is higher (writing a fence entry, as after an expiry); an equal Epoch follows the usual rules. The local
	// backend, whose flock already excludes a second writer, ignores it.
	Epoch uint64
	// Compression names the codec new segments are written with: "s2" (the default, also for ""), "zstd" or
	// "none" (ParseCompression). Segments of every codec are read whatever it says.
	Compression string
}

// Head summarises the log.
type Head struct {
	// LastSeq is the newest committed seq, or the reclaimed-through seq if every entry was reclaimed.
	LastSeq uint64
	// LastCheckpoint is the source checkpoint of LastSeq: where the source resumes.
	LastCheckpoint []byte
	// ReclaimedThrough: entries with Seq <= this were deleted by Reclaim.
	ReclaimedThrough uint64
	// Entries is the number of live entries (Seq > ReclaimedThrough).
	Entries int
	// Bytes is the stored size of the live entries' segments.
	Bytes int64
	// Epoch is the writer epoch: this Log's if it holds the lease, else the newest recorded.
	Epoch uint64
	// Holder is the live writer's owner name, or "" when nobody holds the log.
	Holder string
}

// Log is one write-ahead log. Reads (Entries, ReadSegment, Head) may run
// concurrently with each other and with the single writer's Commit.
type Log struct {
	url   string
	st    store
	opts  Options
	log   *slog.Logger
	codec *codec

	// held mirrors lease for Head, which must not wait behind a slow Commit.
	held atomic.Pointer[heldLease]

	// reclaimMu serialises Reclaim and keeps Close from releasing the lease under one; it is taken before mu.
	reclaimMu sync.Mutex

	mu     sync.Mutex
	lease  writerLease // nil while read-only
	last   uint64      // newest committed seq, valid while lease != nil
	broken error       // set when a commit's outcome is unknown; the Log must be reopened
	closed bool
}

type heldLease struct {
	epoch uint64
	owner string
}

const (
	defaultLeaseTTL = 30 * time.Second
	readWidth       = 8 // parallel object reads and deletes
)

// Open opens the log at file:///abs/dir or s3://bucket/prefix. The Log is
// read-only until Acquire. A local directory that does not exist yet reads as
// an empty log; Acquire creates it.
func Open(ctx context.Context, rawURL string, opts Options) (*Log, error) {
	if opts.LeaseTTL == 0 {
		opts.LeaseTTL = defaultLeaseTTL
	}
	if opts.LeaseTTL < 0 {
		return nil, fmt.Errorf("wal %s: negative lease TTL %s", rawURL, opts.LeaseTTL)
	}
	if opts.Owner == "" {
		host, _ := os.Hostname()
		opts.Owner = fmt.Sprintf("%s:%d", host, os.Getpid())
	}
	comp := DefaultCompression
	if opts.Compression != "" {
		var err error
		if comp, err = ParseCompression(opts.Compression); err != nil {
			return nil, fmt.Errorf("wal %s: %w", rawURL, err)
		}
	}
	lg := opts.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("wal url %q: %w", rawURL, err)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("wal url %q: query and fragment are not allowed", rawURL)
	}
	var st store
	switch u.Scheme {
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return nil, fmt.Errorf("wal url %q: file URLs name a local path (file:///abs/dir), not host %q", rawURL, u.Host)
		}
		if u.Path == "" || !filepath.IsAbs(u.Path) {
			return nil, fmt.Errorf("wal url %q: want an absolute path, as in file:///var/lib/skippr/wal", rawURL)
		}
		root := filepath.Clean(u.Path)
		if fi, err := os.Stat(root); err == nil && !fi.IsDir() {
			return nil, fmt.Errorf("wal url %q: %s is not a directory", rawURL, root)
		}
		st = &localStore{root: root}
	case "s3":
		if u.Host == "" {
			return nil, fmt.Errorf("wal url %q: missing bucket, as in s3://bucket/prefix", rawURL)
		}
		prefix := strings.Trim(u.Path, "/")
		if strings.Contains(prefix, "//") {
			return nil, fmt.Errorf("wal url %q: empty path element in prefix", rawURL)
		}
		s, err := newS3Store(ctx, u.Host, prefix, opts.S3)
		if err != nil {
			return nil, fmt.Errorf("wal %s: %w", rawURL, err)
		}
		st = s
	default:
		return nil, fmt.Errorf("wal url %q: unsupported scheme %q (want file or s3)", rawURL, u.Scheme)
	}
	c, err := newCodec(comp, 4)
	if err != nil {
		return nil, err
	}
	return &Log{url: st.url(""), st: st, opts: opts, log: lg.With("wal", st.url("")), codec: c}, nil
}

// URL is the log's canonical location.
func (l *Log) URL() string { return l.url }

// logState is what a scan of the storage finds.
type logState struct {
	reclaimed uint64 // newest checkpoint record's seq
	last      uint64
	lastCkpt  []byte
	seqs      []uint64 // live commit records, ascending, contiguous after reclaimed
}

func (l *Log) readReclaimed(ctx context.Context) (uint64, []byte, error) {
	objs, err := l.st.list(ctx, checkpointsDir, "")
	if err != nil {
		return 0, nil, fmt.Errorf("wal %s: %w", l.url, err)
	}
	for i := len(objs) - 1; i >= 0; i-- {
		seq, ok := parseSeqName(checkpointsDir, objs[i].name)
		if !ok {
			continue
		}
		b, err := l.st.get(ctx, objs[i].name)
		if errors.Is(err, errNotFound) {
			continue // superseded and deleted since the listing
		}
		if err != nil {
			return 0, nil, fmt.Errorf("wal checkpoint record %s: %w", l.st.url(objs[i].name), err)
		}
		var rec checkpointRecord
		if err := openRecord(kindCheckpoint, b, &rec); err != nil {
			return 0, nil, fmt.Errorf("wal checkpoint record %s: %w", l.st.url(objs[i].name), err)
		}
		if rec.Seq != seq {
			return 0, nil, fmt.Errorf("wal checkpoint record %s: %w", l.st.url(objs[i].name), corrupt(fmt.Sprintf("holds seq %d", rec.Seq)))
		}
		return seq, rec.Checkpoint, nil
	}
	return 0, nil, nil
}

// commitSeqs lists commit records with seq > after, requiring them to be
// contiguous from after+1.
func (l *Log) commitSeqs(ctx context.Context, after uint64) ([]uint64, error) {
	objs, err := l.st.list(ctx, commitsDir, commitName(after))
	if err != nil {
		return nil, fmt.Errorf("wal %s: %w", l.url, err)
	}
	seqs := make([]uint64, 0, len(objs))
	for _, o := range objs {
		seq, ok := parseSeqName(commitsDir, o.name)
		if !ok {
			continue
		}
		if want := after + uint64(len(seqs)) + 1; seq != want {
			prev := "the start"
			if len(seqs) > 0 {
				prev = fmt.Sprintf("entry %d", seqs[len(seqs)-1])
			}
			return nil, fmt.Errorf("wal %s: %w", l.url, &missingEntry{want, fmt.Sprintf("entry %d is missing: %s is followed by entry %d (no %s)",
				want, prev, seq, l.st.url(commitName(want)))})
		}
		seqs = append(seqs, seq)
	}
	return seqs, nil
}

func (l *Log) readCommit(ctx context.Context, seq uint64) (CommitRecord, error) {
	var rec CommitRecord
	name := commitName(seq)
	b, err := l.st.get(ctx, name)
	if errors.Is(err, errNotFound) {
		return rec, fmt.Errorf("wal entry %d: commit record %s: %w", seq, l.st.url(name), &missingEntry{seq, "not found"})
	}
	if err != nil {
		return rec, fmt.Errorf("wal entry %d: commit record %s: %w", seq, l.st.url(name), err)
	}
	if err := openRecord(kindCommit, b, &rec); err != nil {
		return rec, fmt.Errorf("wal entry %d: commit record %s: %w", seq, l.st.url(name), err)
	}
	if rec.Seq != seq {
		return rec, fmt.Errorf("wal entry %d: commit record %s: %w", seq, l.st.url(name), corrupt(fmt.Sprintf("record holds seq %d", rec.Seq)))
	}
	if rec.Segment != "" {
		s, e, ok := parseSegmentName(rec.Segment)
		if !ok || s != seq || e != rec.Epoch {
			return rec, fmt.Errorf("wal entry %d: commit record %s: %w", seq, l.st.url(name),
				corrupt(fmt.Sprintf("segment name %q does not belong to seq %d epoch %d", rec.Segment, seq, rec.Epoch)))
		}
	} else if rec.Size != 0 || rec.CRC32C != 0 {
		return rec, fmt.Errorf("wal entry %d: commit record %s: %w", seq, l.st.url(name), corrupt("fence entry with a size or checksum"))
	}
	return rec, nil
}

// scanAttempts bounds the scans a run of concurrent Reclaims can spoil.
const scanAttempts = 3

// scan reads the log's state. A commit record missing at or below the reclaim mark read after the scan was
// removed by a concurrent Reclaim (it deletes them in no order, while the listing goes on): the scan looks
// again from the new mark, and after scanAttempts such scans fails with ErrReclaimed. Any other hole is lost
// data, ErrMissing naming the entry.
func (l *Log) scan(ctx context.Context) (logState, error) {
	for attempt := 1; ; attempt++ {
		s, err := l.scanOnce(ctx)
		now, ok := l.reclaimedHole(ctx, err)
		if !ok {
			return s, err
		}
		if attempt == scanAttempts {
			return s, fmt.Errorf("wal %s: entries through %d were reclaimed while reading: %w", l.url, now, ErrReclaimed)
		}
	}
}

func (l *Log) scanOnce(ctx context.Context) (logState, error) {
	var s logState
	var err error
	s.reclaimed, s.lastCkpt, err = l.readReclaimed(ctx)
	if err != nil {
		return s, err
	}
	s.last = s.reclaimed
	if s.seqs, err = l.commitSeqs(ctx, s.reclaimed); err != nil {
		return s, err
	}
	if n := len(s.seqs); n > 0 {
		s.last = s.seqs[n-1]
		rec, err := l.readCommit(ctx, s.last)
		if err != nil {
			return s, err
		}
		s.lastCkpt = rec.Checkpoint
	}
	return s, nil
}

// parallel runs fn for 0..n-1 on up to width goroutines and returns the
// error of the lowest index that failed, so reports are deterministic.
func parallel(ctx context.Context, n, width int, fn func(ctx context.Context, i int) error) error {
	errs := make([]error, n)
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(n, width) {
		wg.Go(func() {
			for i := range next {
				errs[i] = fn(ctx, i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return firstErr(errs)
}

func firstErr(errs []error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// Acquire makes this Log the writer: it takes the lease (ErrLocked if a live
// writer holds it), fences a writer whose lease it took over, and deletes
// segments that have no commit record.
func (l *Log) Acquire(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return fmt.Errorf("wal %s: %w", l.url, ErrClosed)
	}
	if l.lease != nil {
		return fmt.Errorf("wal %s: already acquired (epoch %d)", l.url, l.lease.epoch())
	}
	if err := l.st.prepare(ctx); err != nil {
		return fmt.Errorf("wal %s: %w", l.url, err)
	}
	segs, err := l.st.list(ctx, segmentsDir, "")
	if err != nil {
		return fmt.Errorf("wal %s: %w", l.url, err)
	}
	var maxEpoch uint64
	for _, o := range segs {
		if _, e, ok := parseSegmentName(o.name); ok {
			maxEpoch = max(maxEpoch, e)
		}
	}
	lease, err := l.st.lock(ctx, lockRequest{owner: l.opts.Owner, ttl: l.opts.LeaseTTL, minEpoch: maxEpoch, epoch: l.opts.Epoch, log: l.log})
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			if err := lease.release(rctx); err != nil {
				l.log.Warn("release lease after failed Acquire", "err", err)
			}
		}
	}()
	state, err := l.scan(ctx)
	if err != nil {
		return err
	}
	if why := lease.takenOver(); why != "" {
		if err := l.fence(ctx, lease, &state, why); err != nil {
			return err
		}
	}
	if err := l.cleanup(ctx, state); err != nil {
		return err
	}
	if r, isR := l.st.(reserver); isR {
		if err := r.reserve(); err != nil {
			l.log.Warn("wal: could not set space aside for reclaim; a full disk may then need space freed by hand", "err", noSpace(err))
		}
	}
	ok = true
	l.lease, l.last, l.broken = lease, state.last, nil
	l.held.Store(&heldLease{epoch: lease.epoch(), owner: lease.owner()})
	l.log.Info("wal writer acquired", "owner", lease.owner(), "epoch", lease.epoch(),
		"last_seq", state.last, "reclaimed_through", state.reclaimed)
	return nil
}

// fence commits an empty entry under the new epoch. The previous holder never
// released its lease and might have a commit in flight; its next seq is now
// taken, so its conditional create fails and it can never commit after us.
func (l *Log) fence(ctx context.Context, lease writerLease, s *logState, why string) error {
	for range 100 {
		seq := s.last + 1
		rec := CommitRecord{Seq: seq, Checkpoint: s.lastCkpt, Epoch: lease.epoch(), Time: time.Now().UTC()}
		body, err := sealRecord(kindCommit, rec)
		if err != nil {
			return err
		}
		err = l.st.create(ctx, commitName(seq), body)
		if err == nil {
			s.last = seq
			s.seqs = append(s.seqs, seq)
			l.log.Warn("wal took over the lease of a writer that never released it; fenced that writer", "reason", why, "fence_seq", seq, "epoch", lease.epoch())
			return nil
		}
		if !errors.Is(err, errExists) {
			return fmt.Errorf("wal entry %d: write fence %s: %w", seq, l.st.url(commitName(seq)), err)
		}
		// The old writer's commit landed after our scan: it is a real entry.
		prev, err := l.readCommit(ctx, seq)
		if err != nil {
			return err
		}
		s.last, s.lastCkpt = seq, prev.Checkpoint
		s.seqs = append(s.seqs, seq)
	}
	return fmt.Errorf("wal %s: previous writer keeps committing after its lease expired", l.url)
}

// cleanup deletes what no reader may see: segments without a commit record
// (or not the one their record names), and leftovers of an interrupted Reclaim.
func (l *Log) cleanup(ctx context.Context, s logState) error {
	segs, err := l.st.list(ctx, segmentsDir, "")
	if err != nil {
		return fmt.Errorf("wal %s: %w", l.url, err)
	}
	bySeq := make(map[uint64][]string)
	var doomed []string
	for _, o := range segs {
		seq, _, ok := parseSegmentName(o.name)
		switch {
		case !ok:
		case seq <= s.reclaimed || seq > s.last:
			doomed = append(doomed, o.name)
		default:
			bySeq[seq] = append(bySeq[seq], o.name)
		}
	}
	for seq, names := range bySeq {
		if len(names) == 1 {
			continue
		}
		rec, err := l.readCommit(ctx, seq) // a fenced writer's segment shares the seq
		if err != nil {
			return err
		}
		for _, n := range names {
			if n != rec.Segment {
				doomed = append(doomed, n)
			}
		}
	}
	if s.reclaimed > 0 {
		commits, err := l.st.list(ctx, commitsDir, "")
		if err != nil {
			return fmt.Errorf("wal %s: %w", l.url, err)
		}
		for _, o := range commits {
			if seq, ok := parseSeqName(commitsDir, o.name); ok && seq <= s.reclaimed {
				doomed = append(doomed, o.name)
			}
		}
		ckpts, err := l.st.list(ctx, checkpointsDir, "")
		if err != nil {
			return fmt.Errorf("wal %s: %w", l.url, err)
		}
		for _, o := range ckpts {
			if seq, ok := parseSeqName(checkpointsDir, o.name); ok && seq < s.reclaimed {
				doomed = append(doomed, o.name)
			}
		}
	}
	for _, n := range doomed {
		l.log.Info("wal deleting orphan", "object", l.st.url(n))
	}
	if err := parallel(ctx, len(doomed), readWidth, func(ctx context.Context, i int) error {
		return l.st.remove(ctx, doomed[i])
	}); err != nil {
		return fmt.Errorf("wal %s: delete orphans: %w", l.url, err)
	}
	if err := l.st.sweep(ctx); err != nil {
		return fmt.Errorf("wal %s: %w", l.url, err)
	}
	return nil
}

// writable returns the lease if this Log may write now.
func (l *Log) writable() (writerLease, error) {
	switch {
	case l.closed:
		return nil, fmt.Errorf("wal %s: %w", l.url, ErrClosed)
	case l.lease == nil:
		return nil, fmt.Errorf("wal %s: %w", l.url, ErrReadOnly)
	case l.broken != nil:
		return nil, fmt.Errorf("wal %s: refusing to write after an earlier failure; reopen the log: %w", l.url, l.broken)
	}
	if err := l.lease.check(); err != nil {
		return nil, fmt.Errorf("wal %s: %w", l.url, err)
	}
	return l.lease, nil
}

// Commit appends frames as entry last+1: it writes the segment, then creates
// the commit record, which never replaces an existing one. When Commit
// returns nil the entry is durable and the source may be acknowledged up to
// checkpoint. An error before the commit record was attempted leaves the log
// unchanged (Commit may be retried); an error after it leaves the outcome
// unknown, and the Log refuses further commits until it is reopened.
func (l *Log) Commit(ctx context.Context, frames []Frame, checkpoint []byte) (CommitRecord, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lease, err := l.writable()
	if err != nil {
		return CommitRecord{}, err
	}
	seq := l.last + 1
	rows, ids, err := summarize(frames)
	if err != nil {
		return CommitRecord{}, fmt.Errorf("wal commit %d: %w", seq, err)
	}
	seg, err := l.codec.encode(frames)
	if err != nil {
		return CommitRecord{}, fmt.Errorf("wal commit %d: %w", seq, err)
	}
	rec := CommitRecord{
		Seq:        seq,
		Segment:    segmentName(seq, lease.epoch()),
		CRC32C:     crc32c(seg),
		Size:       int64(len(seg)),
		Rows:       rows,
		SchemaIDs:  ids,
		Checkpoint: clone(checkpoint),
		Epoch:      lease.epoch(),
		Time:       time.Now().UTC(),
	}
	if len(frames) == 0 {
		rec.Rows, rec.SchemaIDs = nil, nil
	}
	body, err := sealRecord(kindCommit, rec)
	if err != nil {
		return CommitRecord{}, err
	}
	// The segment upload may take as long as it needs: a segment is harmless
	// until a commit record names it, and its name carries our epoch.
	if err := l.st.put(ctx, rec.Segment, seg); err != nil {
		err = noSpace(err)
		if errors.Is(err, ErrNoSpace) {
			l.dropSegment(rec.Segment) // the store removed its temp file; a renamed but unsynced one goes too
		}
		return CommitRecord{}, fmt.Errorf("wal commit %d: write segment %s: %w", seq, l.st.url(rec.Segment), err)
	}
	if err := lease.check(); err != nil {
		l.dropSegment(rec.Segment)
		return CommitRecord{}, fmt.Errorf("wal commit %d: %w", seq, err)
	}
	if err := failpoint.Hit(failpoint.WALAfterSegment); err != nil {
		l.dropSegment(rec.Segment)
		return CommitRecord{}, fmt.Errorf("wal commit %d: %w", seq, err)
	}
	// The commit record must land while the lease is ours (doc.go, Writer exclusion).
	wctx, cancel := withDeadline(ctx, lease.deadline())
	defer cancel()
	cname := commitName(seq)
	err = l.st.create(wctx, cname, body)
	if errors.Is(err, errExists) {
		l.dropSegment(rec.Segment)
		l.broken = fmt.Errorf("wal commit %d: commit record %s was written by another writer: %w", seq, l.st.url(cname), ErrFenced)
		return CommitRecord{}, l.broken
	}
	if errors.Is(err, errNotWritten) && errors.Is(noSpace(err), ErrNoSpace) {
		// The record never existed, for want of space: the log is as before this Commit, which may be
		// retried. Other failures still poison the log, the conservative reading.
		l.dropSegment(rec.Segment)
		return CommitRecord{}, fmt.Errorf("wal commit %d: commit record %s: %w", seq, l.st.url(cname), noSpace(err))
	}
	if err != nil {
		l.broken = fmt.Errorf("wal commit %d: commit record %s: outcome unknown: %w", seq, l.st.url(cname), err)
		return CommitRecord{}, l.broken
	}
	l.last = seq
	l.log.Debug("wal commit", "seq", seq, "segment", rec.Segment, "bytes", rec.Size)
	return rec, nil
}

func (l *Log) dropSegment(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.st.remove(ctx, name); err != nil {
		l.log.Warn("delete uncommitted segment", "object", l.st.url(name), "err", err)
	}
}

func withDeadline(ctx context.Context, d time.Time) (context.Context, context.CancelFunc) {
	if d.IsZero() {
		return context.WithCancel(ctx)
	}
	return context.WithDeadline(ctx, d)
}

func clone(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return append([]byte(nil), b...)
}

// Entries returns the committed entries with Seq > after, ascending. A
// missing seq is an error naming it; asking for reclaimed entries wraps ErrReclaimed.
//
// A Reclaim beside it deletes commit records after its checkpoint record, in
// parallel and in no order, while the listing (not atomic with the deletes on
// S3 or a directory) goes on: the listing or the reads may then find a hole
// below entries still there. A hole at or below the reclaim mark read after it
// is that Reclaim, ErrReclaimed (look again from the new mark); any other is a
// lost record, ErrMissing naming it.
func (l *Log) Entries(ctx context.Context, after uint64) ([]CommitRecord, error) {
	reclaimed, _, err := l.readReclaimed(ctx)
	if err != nil {
		return nil, err
	}
	if after < reclaimed {
		return nil, fmt.Errorf("wal %s: entries %d through %d were reclaimed: %w", l.url, after+1, reclaimed, ErrReclaimed)
	}
	seqs, err := l.commitSeqs(ctx, after)
	if err != nil {
		return nil, l.reclaimedWhileReading(ctx, after, err)
	}
	recs := make([]CommitRecord, len(seqs))
	err = parallel(ctx, len(seqs), readWidth, func(ctx context.Context, i int) error {
		var err error
		recs[i], err = l.readCommit(ctx, seqs[i])
		return err
	})
	if err != nil {
		return nil, l.reclaimedWhileReading(ctx, after, err)
	}
	return recs, nil
}

// reclaimedWhileReading turns err, from reading the entries after after, into ErrReclaimed when the commit
// record it misses is at or below the reclaim mark now: a concurrent Reclaim deleted it, not a loss.
func (l *Log) reclaimedWhileReading(ctx context.Context, after uint64, err error) error {
	if now, ok := l.reclaimedHole(ctx, err); ok {
		return fmt.Errorf("wal %s: entries %d through %d were reclaimed while reading: %w", l.url, after+1, now, ErrReclaimed)
	}
	return err
}

// reclaimedHole says whether err misses a commit record that the reclaim mark, read now, covers (a concurrent
// Reclaim deleted it), and returns the mark.
func (l *Log) reclaimedHole(ctx context.Context, err error) (uint64, bool) {
	var me *missingEntry
	if !errors.As(err, &me) {
		return 0, false
	}
	now, _, rerr := l.readReclaimed(ctx)
	return now, rerr == nil && now >= me.seq
}

// ReadSegment returns the frames of one entry after checking the segment's
// size and CRC-32C against its commit record. Errors name the seq and object
// and wrap ErrMissing or ErrCorrupt. A fence entry has no frames.
func (l *Log) ReadSegment(ctx context.Context, rec CommitRecord) ([]Frame, error) {
	if rec.Segment == "" {
		if rec.Size != 0 {
			return nil, fmt.Errorf("wal entry %d: %w", rec.Seq, corrupt(fmt.Sprintf("no segment name but size %d", rec.Size)))
		}
		return nil, nil
	}
	if s, _, ok := parseSegmentName(rec.Segment); !ok || s != rec.Seq {
		return nil, fmt.Errorf("wal entry %d: %w", rec.Seq, corrupt(fmt.Sprintf("%q is not a segment name of this entry", rec.Segment)))
	}
	where := l.st.url(rec.Segment)
	b, err := l.st.get(ctx, rec.Segment)
	if errors.Is(err, errNotFound) {
		return nil, fmt.Errorf("wal entry %d: segment %s: %w", rec.Seq, where, &reasonError{"not found", ErrMissing})
	}
	if err != nil {
		return nil, fmt.Errorf("wal entry %d: segment %s: %w", rec.Seq, where, err)
	}
	if int64(len(b)) != rec.Size {
		return nil, fmt.Errorf("wal entry %d: segment %s: %w", rec.Seq, where, corrupt(fmt.Sprintf("size mismatch: want %d got %d", rec.Size, len(b))))
	}
	if got := crc32c(b); got != rec.CRC32C {
		return nil, fmt.Errorf("wal entry %d: segment %s: %w", rec.Seq, where, corrupt(fmt.Sprintf("crc mismatch: want %d got %d", rec.CRC32C, got)))
	}
	frames, err := l.codec.decode(b)
	if err != nil {
		return nil, fmt.Errorf("wal entry %d: segment %s: %w", rec.Seq, where, err)
	}
	return frames, nil
}

// Reclaim deletes entries with Seq <= upTo. It first writes a checkpoint
// record holding upTo and that entry's source checkpoint, so Head still
// reports both when no entry is left.
//
// It holds the commit lock only to check the lease and the last seq: the
// listing and deleting that follow touch only entries <= upTo, which no Commit
// writes, and on S3 they take long enough (three listings, a DELETE per
// object) to double a concurrent commit's p99 (BENCHMARKS.md). Reclaims run
// one at a time.
func (l *Log) Reclaim(ctx context.Context, upTo uint64) error {
	l.reclaimMu.Lock()
	defer l.reclaimMu.Unlock()
	l.mu.Lock()
	lease, err := l.writable()
	last := l.last
	l.mu.Unlock()
	if err != nil {
		return err
	}
	if upTo > last {
		return fmt.Errorf("wal %s: cannot reclaim through %d: the last entry is %d", l.url, upTo, last)
	}
	reclaimed, _, err := l.readReclaimed(ctx)
	if err != nil {
		return err
	}
	if upTo <= reclaimed {
		return nil
	}
	rec, err := l.readCommit(ctx, upTo)
	if err != nil {
		return fmt.Errorf("wal reclaim through %d: %w", upTo, err)
	}
	body, err := sealRecord(kindCheckpoint, checkpointRecord{Seq: upTo, Checkpoint: rec.Checkpoint, Epoch: lease.epoch(), Time: time.Now().UTC()})
	if err != nil {
		return err
	}
	cname := checkpointName(upTo)
	err = l.st.create(ctx, cname, body)
	r, isR := l.st.(reserver)
	if errors.Is(noSpace(err), ErrNoSpace) && isR && r.unreserve() == nil {
		l.log.Warn("wal disk full: recording the reclaim in the space set aside for it", "through", upTo)
		err = l.st.create(ctx, cname, body)
	}
	if err != nil && !errors.Is(err, errExists) {
		return fmt.Errorf("wal reclaim through %d: write %s: %w", upTo, l.st.url(cname), noSpace(err))
	}
	// From here on entries <= upTo are gone for every reader; deleting is tidying.
	if err := failpoint.Hit(failpoint.WALAfterReclaimRecord); err != nil {
		return fmt.Errorf("wal reclaim through %d: %w", upTo, err)
	}
	var commits, segs, ckpts []string
	objs, err := l.st.list(ctx, commitsDir, "")
	if err != nil {
		return fmt.Errorf("wal reclaim through %d: %w", upTo, err)
	}
	for _, o := range objs {
		if seq, ok := parseSeqName(commitsDir, o.name); ok && seq <= upTo {
			commits = append(commits, o.name)
		}
	}
	if objs, err = l.st.list(ctx, segmentsDir, ""); err != nil {
		return fmt.Errorf("wal reclaim through %d: %w", upTo, err)
	}
	for _, o := range objs {
		if seq, _, ok := parseSegmentName(o.name); ok && seq <= upTo {
			segs = append(segs, o.name)
		}
	}
	if objs, err = l.st.list(ctx, checkpointsDir, ""); err != nil {
		return fmt.Errorf("wal reclaim through %d: %w", upTo, err)
	}
	for _, o := range objs {
		if seq, ok := parseSeqName(checkpointsDir, o.name); ok && seq < upTo {
			ckpts = append(ckpts, o.name)
		}
	}
	// Commit records go before their segments, so a crash in between leaves
	// only orphan segments, never a record without its segment.
	for _, batch := range [][]string{commits, segs, ckpts} {
		if err := parallel(ctx, len(batch), readWidth, func(ctx context.Context, i int) error {
			return l.st.remove(ctx, batch[i])
		}); err != nil {
			return fmt.Errorf("wal reclaim through %d: %w", upTo, err)
		}
	}
	if isR {
		if err := r.reserve(); err != nil {
			l.log.Debug("wal: space for the next reclaim not set aside yet", "err", err)
		}
	}
	l.log.Info("wal reclaimed", "through", upTo, "commit_records", len(commits), "segments", len(segs))
	return nil
}

// Head reports the log's position and size.
func (l *Log) Head(ctx context.Context) (Head, error) {
	var h Head
	s, err := l.scan(ctx)
	if err != nil {
		return h, err
	}
	h.LastSeq, h.LastCheckpoint, h.ReclaimedThrough, h.Entries = s.last, s.lastCkpt, s.reclaimed, len(s.seqs)
	segs, err := l.st.list(ctx, segmentsDir, segmentName(s.reclaimed, math.MaxUint64))
	if err != nil {
		return h, fmt.Errorf("wal %s: %w", l.url, err)
	}
	for _, o := range segs {
		if seq, _, ok := parseSegmentName(o.name); ok && seq > s.reclaimed && seq <= s.last {
			h.Bytes += o.size
		}
	}
	if held := l.held.Load(); held != nil {
		h.Epoch, h.Holder = held.epoch, held.owner
		return h, nil
	}
	if h.Holder, h.Epoch, err = l.st.holder(ctx); err != nil {
		return h, fmt.Errorf("wal %s: %w", l.url, err)
	}
	return h, nil
}

// Close releases the lease (if held), waiting up to 10 s for the store. The Log cannot be used afterwards.
func (l *Log) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return l.CloseContext(ctx)
}

// CloseContext is Close with the lease's release bounded by ctx, a renewal in flight included: a release
// that cannot finish in time (the store unreachable) leaves the lease to expire at its TTL, as a crashed
// writer's does, and a writer of a higher epoch takes it at once anyway.
func (l *Log) CloseContext(ctx context.Context) error {
	l.reclaimMu.Lock() // a Reclaim in progress finishes with the lease it checked
	defer l.reclaimMu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	l.held.Store(nil)
	var err error
	if l.lease != nil {
		if rerr := l.lease.release(ctx); rerr != nil {
			err = fmt.Errorf("wal %s: release lease: %w", l.url, rerr)
		}
		l.lease = nil
	}
	l.codec.close()
	return errors.Join(err, l.st.close())
}
