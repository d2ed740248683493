package dest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	iceio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
	"github.com/apache/iceberg-go/table/compaction"
)

// CompactOptions tune Compact. Zero values take the defaults.
type CompactOptions struct {
	// TargetFileSize of rewritten files (default: the settings' target_file_size).
	TargetFileSize int64
	// MinInputFiles a partition needs before its small files are rewritten (default 2).
	MinInputFiles uint
	// ExpireOlderThan expires snapshots older than this (default 24h; negative: keep all).
	ExpireOlderThan time.Duration
	// RetainLast snapshots are kept whatever their age (default 10).
	RetainLast int
	// OrphansOlderThan: files under the table's location that no metadata references and that are older than
	// this are deleted (default 72h, so that a writer's files not yet committed are never taken; negative:
	// keep all). They are what a crash between writing files and committing them leaves behind.
	OrphansOlderThan time.Duration
}

// CompactResult reports what Compact did.
type CompactResult struct {
	Table                      string
	RewrittenGroups            int
	RemovedDataFiles           int
	AddedDataFiles             int
	RemovedEqualityDeleteFiles int
	RemovedPositionDeleteFiles int
	SnapshotsBefore            int
	SnapshotsAfter             int
	DeletedOrphans             []string
	// ExpiryHeldBy names the re-snapshot property that kept every snapshot: one is open on the table.
	ExpiryHeldBy string `json:",omitempty"`
}

// Compact is the maintenance `skippr lake compact TABLE` runs: it rewrites a table's small data files and
// every data file that equality deletes apply to into files of the target size with the deletes applied,
// removes the delete files nothing needs any more, then expires old snapshots (deleting the files only they
// referenced). Table properties — skippr's fences — are untouched, so compaction never disturbs
// exactly-once. On the embedded SQL catalog it holds the catalog lock, so applies (which hold it shared)
// wait for it; elsewhere a compaction that loses a race with a pipeline commit is planned again, like an apply.
func Compact(ctx context.Context, raw json.RawMessage, stream string, opts CompactOptions) (CompactResult, error) {
	s, err := ParseSettings(raw)
	if err != nil {
		return CompactResult{}, err
	}
	oc, err := connect(ctx, s)
	if err != nil {
		return CompactResult{}, err
	}
	defer oc.Close()
	// Applies wait while this holds the lock, so a compaction lands beside a busy sync (lock.go).
	lk, err := lockCatalog(ctx, s, true)
	if err != nil {
		return CompactResult{}, err
	}
	defer lk.unlock()
	ident := append(s.NamespaceIdent(), s.TableName(stream))
	res := CompactResult{Table: strings.Join(ident, ".")}
	if opts.TargetFileSize == 0 {
		opts.TargetFileSize = s.TargetFileSize
	}
	if opts.MinInputFiles == 0 {
		opts.MinInputFiles = 2
	}
	if opts.ExpireOlderThan == 0 {
		opts.ExpireOlderThan = 24 * time.Hour
	}
	if opts.RetainLast == 0 {
		opts.RetainLast = 10
	}
	if opts.OrphansOlderThan == 0 {
		opts.OrphansOlderThan = 72 * time.Hour
	}
	for attempt := 1; ; attempt++ {
		err = compactOnce(ctx, oc, ident, opts, &res)
		if err == nil || !isConflict(err) || attempt >= maxCommitAttempts {
			break
		}
		select {
		case <-ctx.Done():
			return res, context.Cause(ctx)
		case <-time.After(time.Duration(attempt*50) * time.Millisecond):
		}
	}
	if err != nil {
		return res, fmt.Errorf("compact %s: %w", res.Table, err)
	}
	if held := openResnapshot(ctx, oc, ident); held != "" {
		// The snapshots since its begin say which rows it received (resnapshot.go): none may go before its end.
		res.ExpiryHeldBy = held
	} else if opts.ExpireOlderThan >= 0 {
		for attempt := 1; ; attempt++ {
			err = expire(ctx, oc, ident, opts, &res)
			if err == nil || !isConflict(err) || attempt >= maxCommitAttempts {
				break
			}
		}
		if err != nil {
			return res, fmt.Errorf("expire snapshots of %s: %w", res.Table, err)
		}
	}
	if opts.OrphansOlderThan >= 0 {
		tbl, err := oc.cat.LoadTable(ctx, ident)
		if err != nil {
			return res, fmt.Errorf("compact %s: %w", res.Table, err)
		}
		or, err := tbl.DeleteOrphanFiles(ctx, table.WithFilesOlderThan(opts.OrphansOlderThan))
		if err != nil {
			return res, fmt.Errorf("delete orphan files of %s: %w", res.Table, err)
		}
		res.DeletedOrphans = or.DeletedFiles
	}
	return res, nil
}

func compactOnce(ctx context.Context, oc *openCatalog, ident []string, opts CompactOptions, res *CompactResult) error {
	tbl, err := oc.cat.LoadTable(ctx, ident)
	if err != nil {
		return err
	}
	res.SnapshotsBefore = len(tbl.Metadata().Snapshots())
	snap := tbl.CurrentSnapshot()
	if snap == nil {
		return nil
	}
	tasks, err := tbl.Scan().PlanFiles(ctx)
	if err != nil {
		return fmt.Errorf("plan files: %w", err)
	}
	cfg := compaction.DefaultConfig()
	cfg.TargetFileSizeBytes = opts.TargetFileSize
	cfg.MinFileSizeBytes = opts.TargetFileSize * 3 / 4
	cfg.MaxFileSizeBytes = opts.TargetFileSize * 9 / 5
	// Any delete makes a file worth rewriting, even alone in its partition: that is how equality deletes get
	// folded away. Small files without deletes need MinInputFiles companions to be worth the rewrite.
	cfg.MinInputFiles = 1
	cfg.DeleteFileThreshold = 1
	plan, err := cfg.PlanCompaction(tasks)
	if err != nil {
		return err
	}
	var groups []table.CompactionTaskGroup
	rewritten := map[string]struct{}{}
	for _, g := range plan.Groups {
		if len(g.Tasks) < int(opts.MinInputFiles) && g.DeleteFileCount == 0 {
			continue
		}
		groups = append(groups, table.CompactionTaskGroup{PartitionKey: g.PartitionKey, Tasks: g.Tasks, TotalSizeBytes: g.TotalSizeBytes})
		for _, t := range g.Tasks {
			rewritten[t.File.FilePath()] = struct{}{}
		}
	}
	if len(groups) == 0 {
		return nil
	}
	fs, err := tbl.FS(ctx)
	if err != nil {
		return err
	}
	deadEq, err := compaction.CollectDeadEqualityDeletesWithSpecs(ctx, fs, tbl.Metadata(), snap, rewritten)
	if err != nil {
		return fmt.Errorf("find dead equality deletes: %w", err)
	}
	deadPos, err := compaction.CollectDeadPositionDeletes(ctx, fs, snap, rewritten)
	if err != nil {
		return fmt.Errorf("find dead position deletes: %w", err)
	}
	tx := tbl.NewTransaction()
	r, err := tx.RewriteDataFiles(ctx, groups, table.RewriteDataFilesOptions{
		ExtraDeleteFilesToRemove: append(deadEq, deadPos...),
		SnapshotProps:            map[string]string{"skippr.operation": "compact"},
		GroupOptions: []table.CompactionGroupOption{table.WithCompactionTargetFileSize(opts.TargetFileSize),
			table.WithCompactionParquetRowGroupLimit(RowGroupRows)},
	})
	if err != nil {
		return err
	}
	if _, err := tx.Commit(ctx); err != nil {
		return err
	}
	res.RewrittenGroups = r.RewrittenGroups
	res.RemovedDataFiles = r.RemovedDataFiles
	res.AddedDataFiles = r.AddedDataFiles
	res.RemovedEqualityDeleteFiles = r.RemovedEqualityDeleteFiles
	res.RemovedPositionDeleteFiles = r.RemovedPositionDeleteFiles
	return nil
}

// goneIsRemoved is a file system (writes, reads and stats passed through) whose Remove of a missing file
// succeeds.
type goneIsRemoved struct{ *recordingIO }

func (g goneIsRemoved) Remove(name string) error {
	if err := g.recordingIO.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

func expire(ctx context.Context, oc *openCatalog, ident []string, opts CompactOptions, res *CompactResult) error {
	tbl, err := oc.cat.LoadTable(ctx, ident)
	if err != nil {
		return err
	}
	base, err := tbl.FS(ctx)
	if err != nil {
		return err
	}
	// iceberg-go's expiry also deletes the files that an expired compaction snapshot's manifests list as
	// DELETED — already deleted by the expiry of the snapshots before it — and fails on the first that is
	// gone, after its commit landed. A file that is already gone is what the removal wanted.
	tbl = table.New(tbl.Identifier(), tbl.Metadata(), tbl.MetadataLocation(),
		func(context.Context) (iceio.IO, error) { return goneIsRemoved{&recordingIO{base: base}}, nil }, oc.cat)
	tx := tbl.NewTransaction()
	if err := tx.ExpireSnapshots(table.WithOlderThan(opts.ExpireOlderThan), table.WithRetainLast(opts.RetainLast)); err != nil {
		return err
	}
	after, err := tx.Commit(ctx)
	if err != nil {
		return err
	}
	if after == nil {
		return errors.New("commit returned no table")
	}
	res.SnapshotsAfter = len(after.Metadata().Snapshots())
	return nil
}

// openResnapshot returns the property of a re-snapshot open on the table, if any: "" when none is (or the table
// cannot be loaded, which the expiry then reports).
func openResnapshot(ctx context.Context, oc *openCatalog, ident []string) string {
	tbl, err := oc.cat.LoadTable(ctx, ident)
	if err != nil {
		return ""
	}
	for k := range tbl.Properties() {
		if strings.HasPrefix(k, "skippr.pipeline.") && strings.HasSuffix(k, ".resnapshot") {
			return k
		}
	}
	return ""
}
