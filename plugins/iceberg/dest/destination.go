package dest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/iceberg-go/catalog"
	iceio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
	"github.com/google/uuid"

	"github.com/skippr-dev/skippr/plugin-sdk/rowmeta"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
)

// Destination writes change batches into Iceberg tables. It implements serve.SessionDestination (stream.go).
type Destination struct {
	Version string
	Log     *slog.Logger
	// SetMemoryLimit, when set, receives the settings' memory_limit before an apply (main passes
	// debug.SetMemoryLimit; tests in one process with other code leave it nil).
	SetMemoryLimit func(int64) int64

	mu       sync.Mutex
	cats     map[string]*openCatalog // by raw settings: one connection per catalog for the process's life
	memLimit int64                   // what SetMemoryLimit was last given

	// plans keeps each table's lake plan by metadata location (PlanLake).
	plans planCache

	// commitMu makes commits to embedded SQLite catalogs take turns (tableAttempt.catalogCommit).
	commitMu sync.Mutex

	// retries counts commits that lost a race and were rebuilt; spills counts chunks written out before their
	// commit (spill.go); tests read them.
	retries atomic.Int64
	spills  atomic.Int64
	// indexSpills counts spilled tables whose key index went to disk (keyruns.go); tests read it.
	indexSpills atomic.Int64
	// resnapSpills counts re-snapshot ends whose key diff spilled to disk (keydiff.go); tests read it.
	resnapSpills atomic.Int64
	// hooks let tests stop an apply at the points a crash or a race matters.
	hooks hooks
}

type hooks struct {
	// beforeCommit runs after a table's files are written, before its catalog commit.
	beforeCommit func(table string, attempt int) error
	// afterCommit runs after a table's commit succeeded.
	afterCommit func(table string) error
	// afterRename runs after the catalog renamed a table (to: its new name) for a renamed stream.
	afterRename func(to string) error
	// bufferBudget, when positive, replaces the share of memory_limit an apply buffers before it spills, so
	// that tests spill with a few rows.
	bufferBudget int64
	// resnapBudget, when positive, replaces the share of memory_limit a re-snapshot's end diffs keys in, so that
	// tests spill with a few keys; spillDir, when set, is where it spills (default: the system's temp directory).
	resnapBudget int64
	spillDir     string
	// indexLimit, when positive, replaces the bytes a spilled table's key index may take in memory (the buffer
	// budget) before it goes to disk; negative keeps it in memory.
	indexLimit int64
	// resnapDiffing runs when a re-snapshot's end has spilled both sides of its key diff, before it diffs them.
	resnapDiffing func()
}

func (d *Destination) log() *slog.Logger {
	if d.Log != nil {
		return d.Log
	}
	return slog.Default()
}

func (d *Destination) Spec() serve.Spec {
	return serve.Spec{Name: "iceberg", Version: d.Version, Kind: serve.KindDestination,
		Description:    "Apache Iceberg tables (embedded SQLite catalog or REST catalog; local or S3 warehouse), exactly-once with row-level updates and deletes",
		SettingsSchema: json.RawMessage(SettingsSchema)}
}

// catalog returns the open catalog for these settings, connecting on first use.
func (d *Destination) catalog(ctx context.Context, raw json.RawMessage, s Settings) (*openCatalog, error) {
	key := string(raw)
	d.mu.Lock()
	defer d.mu.Unlock()
	if oc, ok := d.cats[key]; ok {
		return oc, nil
	}
	oc, err := connect(ctx, s)
	if err != nil {
		return nil, err
	}
	if d.cats == nil {
		d.cats = map[string]*openCatalog{}
	}
	d.cats[key] = oc
	return oc, nil
}

// closeCatalog closes the catalog connection of raw, if open.
func (d *Destination) closeCatalog(raw json.RawMessage) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	oc, ok := d.cats[string(raw)]
	if !ok {
		return nil
	}
	delete(d.cats, string(raw))
	return oc.Close()
}

// Close closes every catalog connection.
func (d *Destination) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	var errs []error
	for k, oc := range d.cats {
		errs = append(errs, oc.Close())
		delete(d.cats, k)
	}
	return errors.Join(errs...)
}

// Check connects to the catalog, makes sure the namespace can be used, and writes and removes a probe file in
// the warehouse, so that wrong credentials or an unwritable directory show up before the first apply.
func (d *Destination) Check(ctx context.Context, raw json.RawMessage) error {
	s, err := ParseSettings(raw)
	if err != nil {
		return err
	}
	oc, err := d.catalog(ctx, raw, s)
	if err != nil {
		return err
	}
	if err := ensureNamespace(ctx, oc.cat, s.NamespaceIdent()); err != nil {
		return err
	}
	if s.Catalog.Type == "rest" {
		// The REST catalog chooses table locations, and a table bucket (SeaweedFS, S3 Tables) refuses writes
		// outside them: the namespace call above already proved the credentials.
		return nil
	}
	fs, err := iceio.LoadFS(ctx, s.ioProps(), s.Catalog.Warehouse)
	if err != nil {
		return fmt.Errorf("warehouse %s: %w", s.Catalog.Warehouse, err)
	}
	wfs, ok := fs.(iceio.WriteFileIO)
	if !ok {
		return fmt.Errorf("warehouse %s: file system is read-only", s.Catalog.Warehouse)
	}
	probe := strings.TrimSuffix(s.Catalog.Warehouse, "/") + "/.skippr-check-" + uuid.NewString()
	if err := wfs.WriteFile(probe, []byte("skippr check\n")); err != nil {
		return fmt.Errorf("warehouse %s is not writable: %w", s.Catalog.Warehouse, err)
	}
	if err := wfs.Remove(probe); err != nil {
		return fmt.Errorf("warehouse %s: remove probe %s: %w", s.Catalog.Warehouse, probe, err)
	}
	return nil
}

func (d *Destination) Capabilities(_ context.Context, raw json.RawMessage) (serve.Capabilities, error) {
	if _, err := ParseSettings(raw); err != nil {
		return serve.Capabilities{}, err
	}
	return serve.Capabilities{ExactlyOnce: true, Deletes: true, SchemaEvolution: true, Truncate: true, Coalesce: true, Resnapshot: true, RenamedStream: true}, nil
}

// Property keys: see doc.go.
const (
	propStream = "skippr.stream"
	// propTruncate marks the snapshot that emptied a table for a truncate of its stream.
	propTruncate = "skippr.truncate"
)

func seqKey(pipeline string) string { return "skippr.pipeline." + pipeline + ".sequence" }

func parseSeq(props map[string]string, key, where string) (uint64, error) {
	v, ok := props[key]
	if !ok || v == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: property %s=%q is not a sequence number", where, key, v)
	}
	return n, nil
}

// readMarker returns the last sequence number whose every table commit is done.
func readMarker(ctx context.Context, cat catalog.Catalog, ns []string, pipeline string) (uint64, error) {
	props, err := cat.LoadNamespaceProperties(ctx, ns)
	if errors.Is(err, catalog.ErrNoSuchNamespace) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("namespace %s: %w", strings.Join(ns, "."), err)
	}
	return parseSeq(props, seqKey(pipeline), "namespace "+strings.Join(ns, "."))
}

func tableSeq(tbl *table.Table, pipeline string) (uint64, error) {
	return parseSeq(tbl.Properties(), seqKey(pipeline), "table "+strings.Join(tbl.Identifier(), "."))
}

// lastApplied returns the pipeline's completion marker as Sequence, and each table's own fence in Streams.
func lastApplied(ctx context.Context, oc *openCatalog, s Settings, pipeline string) (serve.Applied, error) {
	ns := s.NamespaceIdent()
	a := serve.Applied{Streams: map[string]uint64{}}
	var err error
	if a.Sequence, err = readMarker(ctx, oc.cat, ns, pipeline); err != nil {
		return a, err
	}
	exists, err := oc.cat.CheckNamespaceExists(ctx, ns)
	if err != nil {
		return a, fmt.Errorf("namespace %s: %w", s.Namespace, err)
	}
	if !exists {
		return a, nil
	}
	for ident, err := range oc.cat.ListTables(ctx, ns) {
		if err != nil {
			return a, fmt.Errorf("list tables of %s: %w", s.Namespace, err)
		}
		tbl, err := oc.cat.LoadTable(ctx, ident)
		if err != nil {
			return a, fmt.Errorf("load table %s: %w", strings.Join(ident, "."), err)
		}
		if tbl.Properties()[propHistory] != "" {
			continue // a stream's history: its mirror's fence is the stream's
		}
		n, err := tableSeq(tbl, pipeline)
		if err != nil {
			return a, err
		}
		if n == 0 {
			continue
		}
		stream := tbl.Properties()[propStream]
		if stream == "" {
			stream = ident[len(ident)-1]
		}
		a.Streams[stream] = max(a.Streams[stream], n)
	}
	return a, nil
}

// autoCompact compacts the tables of an apply that hold more files than the policy allows. The apply has
// committed: a failed compaction is logged and tried again after a later apply.
func (d *Destination) autoCompact(ctx context.Context, oc *openCatalog, s Settings, raw json.RawMessage, groups []*tableGroup) {
	for _, g := range groups {
		if g.history {
			continue // Compact finds a table by its stream, which names the mirror
		}
		tbl, err := oc.cat.LoadTable(ctx, append(s.NamespaceIdent(), g.table))
		if err != nil || tbl.CurrentSnapshot() == nil || tbl.CurrentSnapshot().Summary == nil {
			continue
		}
		props := tbl.CurrentSnapshot().Summary.Properties
		data, _ := strconv.Atoi(props["total-data-files"])
		deletes, _ := strconv.Atoi(props["total-delete-files"])
		p := s.AutoCompact
		if (p.MaxDataFiles == 0 || data <= p.MaxDataFiles) && (p.MaxDeleteFiles == 0 || deletes <= p.MaxDeleteFiles) {
			continue
		}
		res, err := Compact(ctx, raw, g.stream, CompactOptions{})
		if err != nil {
			d.log().Warn("iceberg: automatic compaction failed; the next apply tries again", "table", g.table, "err", err)
			continue
		}
		d.log().Info("iceberg: compacted", "table", res.Table, "data_files", data, "delete_files", deletes,
			"removed_data_files", res.RemovedDataFiles, "added_data_files", res.AddedDataFiles,
			"removed_delete_files", res.RemovedEqualityDeleteFiles+res.RemovedPositionDeleteFiles)
	}
}

// tableGroup is the part of an apply that goes to one table, in log order.
type tableGroup struct {
	stream, table string
	items         []serve.Item
	// truncated: the stream was truncated in this apply; items holds only what came after the truncate (and
	// the schema changes before it), and the table's commit removes every row it held.
	truncated bool
	// meta is what the stream's rows carry beyond its columns (rowmeta: soft_delete, metadata_columns); for a
	// history table, the history's columns instead (history.go).
	meta rowmeta.Options
	// history: the group is the stream's <table>_history, every change appended as its own row (history.go).
	history bool
	// syncedAt is the apply's time, _skippr_synced_at of every row it writes.
	syncedAt time.Time
}
