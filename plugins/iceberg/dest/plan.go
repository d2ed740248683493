package dest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	iceio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"

	"github.com/skippr-dev/skippr/plugin-sdk/lakequery"
)

// PlanOptions say which pipeline's fence to report, which streams to include besides the namespace's tables,
// and where to copy files that are not on the local file system (DuckDB's parquet reader reads local files
// only here: its httpfs extension is not built in).
type PlanOptions struct {
	Pipeline string
	Streams  []string
	FetchDir string
	settings string // the raw settings, part of the plan cache's key
}

// PlanTables plans every table of the namespace and every stream asked for, over a connection of its own and
// without the cache a Destination keeps (PlanLake).
//
// The plan is what a reader outside iceberg-go needs to read the current snapshots itself (see package
// lakequery): `skippr query` hands it to the DuckDB plugin, which reads the Parquet files and applies the
// deletes that iceberg-go's planning matched to each file.
func PlanTables(ctx context.Context, raw json.RawMessage, opts PlanOptions) (*lakequery.Plan, error) {
	s, err := ParseSettings(raw)
	if err != nil {
		return nil, err
	}
	oc, err := connect(ctx, s)
	if err != nil {
		return nil, err
	}
	defer oc.Close()
	return planTables(ctx, oc.cat, s, opts, nil)
}

// planTables plans the tables through cat; cache, when set, keeps each table's plan by its metadata location.
func planTables(ctx context.Context, cat catalog.Catalog, s Settings, opts PlanOptions, cache *planCache) (*lakequery.Plan, error) {
	ns := s.NamespaceIdent()
	p := &lakequery.Plan{Namespace: s.Namespace}
	seen := map[string]bool{}
	idents := map[string][]string{}
	var names []string
	add := func(stream string, ident []string) {
		name := strings.Join(ident, ".")
		if seen[name] {
			return
		}
		seen[name] = true
		idents[name] = ident
		names = append(names, name)
		p.Tables = append(p.Tables, lakequery.TablePlan{Stream: stream, Name: name, Table: ident[len(ident)-1]})
	}
	for _, st := range opts.Streams {
		add(st, append(slices.Clone(ns), s.TableName(st)))
	}
	exists, err := cat.CheckNamespaceExists(ctx, ns)
	if err != nil {
		return nil, fmt.Errorf("namespace %s: %w", s.Namespace, err)
	}
	if exists {
		for ident, err := range cat.ListTables(ctx, ns) {
			if err != nil {
				return nil, fmt.Errorf("list tables of %s: %w", s.Namespace, err)
			}
			add(ident[len(ident)-1], ident)
		}
	}
	for i := range p.Tables {
		if err := planTable(ctx, cat, idents[p.Tables[i].Name], &p.Tables[i], opts, cache); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// planCache keeps the newest plan of each table by the metadata location it was made from: a table's metadata
// file is written once and never changed, so while the catalog points at the same file (no apply, compaction,
// re-snapshot or truncate committed since) the plan is the same, and a statement of `skippr serve` costs one
// catalog load per table instead of a scan of its manifests. A table whose location moved is planned again
// and its old plan dropped: the cache holds one plan per (table, pipeline, fetch directory).
//
// Above the tables, an SQL catalog lets a statement skip the catalog's listing and the tables' loads (each a
// read and parse of a metadata JSON file that grows with every commit) when nothing moved: one query of
// every table's metadata location (catalogPointers) equal to the one read before the last whole plan of the
// same request means the catalog is in the state that plan saw, so it is the answer (wholePlan).
type planCache struct {
	mu    sync.Mutex
	plans map[planKey]cachedPlan
	whole map[wholeKey]wholePlan
	// scans counts the tables planned (not taken from the cache), loads the requests that listed and loaded
	// the catalog's tables (not answered by wholePlan); tests read them.
	scans, loads atomic.Int64
}

// wholeKey is one plan request but its streams: the streams asked for follow the WAL's contents, so they are
// checked (wholePlan.streams) rather than keyed on, which keeps one whole plan per reader.
type wholeKey struct{ settings, pipeline, fetchDir string }

type wholePlan struct {
	streams, pointers string
	plan              lakequery.Plan
}

func (c *planCache) getWhole(k wholeKey, streams, pointers string) (lakequery.Plan, bool) {
	if c == nil || pointers == "" {
		return lakequery.Plan{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.whole[k]
	if !ok || e.streams != streams || e.pointers != pointers {
		return lakequery.Plan{}, false
	}
	p := e.plan
	p.Tables = slices.Clone(p.Tables)
	return p, true
}

// putWhole keeps p as the plan of k while the catalog's pointers are those read before p was made. A commit
// between that read and the plan makes p newer than pointers say; the next statement then reads other
// pointers (a metadata location is never reused) and plans again: never an older plan than the catalog holds.
func (c *planCache) putWhole(k wholeKey, streams, pointers string, p lakequery.Plan) {
	if c == nil || pointers == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.whole == nil {
		c.whole = map[wholeKey]wholePlan{}
	}
	p.Tables = slices.Clone(p.Tables)
	c.whole[k] = wholePlan{streams: streams, pointers: pointers, plan: p}
}

type planKey struct{ settings, table, pipeline, fetchDir string }

type cachedPlan struct {
	metadata string
	plan     lakequery.TablePlan
}

func (c *planCache) get(k planKey, metadata string) (lakequery.TablePlan, bool) {
	if c == nil {
		return lakequery.TablePlan{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.plans[k]
	if !ok || e.metadata != metadata {
		return lakequery.TablePlan{}, false
	}
	return e.plan, true
}

func (c *planCache) put(k planKey, metadata string, tp lakequery.TablePlan) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.plans == nil {
		c.plans = map[planKey]cachedPlan{}
	}
	c.plans[k] = cachedPlan{metadata: metadata, plan: tp}
}

func planTable(ctx context.Context, cat catalog.Catalog, ident []string, tp *lakequery.TablePlan, opts PlanOptions, cache *planCache) error {
	tbl, err := cat.LoadTable(ctx, ident)
	if errors.Is(err, catalog.ErrNoSuchTable) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("load table %s: %w", tp.Name, err)
	}
	key := planKey{settings: opts.settings, table: tp.Name, pipeline: opts.Pipeline, fetchDir: opts.FetchDir}
	if cached, ok := cache.get(key, tbl.MetadataLocation()); ok {
		*tp = cached
		return nil
	}
	if err := planLoaded(ctx, tbl, tp, opts); err != nil {
		return err
	}
	if cache != nil {
		cache.scans.Add(1)
	}
	cache.put(key, tbl.MetadataLocation(), *tp)
	return nil
}

// planLoaded plans a loaded table's current snapshot into tp.
func planLoaded(ctx context.Context, tbl *table.Table, tp *lakequery.TablePlan, opts PlanOptions) error {
	var err error
	tp.Exists = true
	if st := tbl.Properties()[propStream]; st != "" {
		tp.Stream = st
	}
	if opts.Pipeline != "" {
		if tp.Fence, err = tableSeq(tbl, opts.Pipeline); err != nil {
			return err
		}
	}
	sc := tbl.Schema()
	as, err := table.SchemaToArrowSchema(sc, nil, true, false)
	if err != nil {
		return fmt.Errorf("table %s: schema to arrow: %w", tp.Name, err)
	}
	if as, err = withInitialDefaults(sc, as); err != nil {
		return fmt.Errorf("table %s: %w", tp.Name, err)
	}
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(as), ipc.WithAllocator(memory.DefaultAllocator))
	if err := w.Close(); err != nil {
		return fmt.Errorf("table %s: encode schema: %w", tp.Name, err)
	}
	tp.ArrowSchema = buf.Bytes()
	for _, id := range sc.IdentifierFieldIDs {
		if n, ok := sc.FindColumnName(id); ok {
			tp.Key = append(tp.Key, n)
		}
	}
	snap := tbl.CurrentSnapshot()
	if snap == nil {
		return nil
	}
	tp.SnapshotID, tp.SnapshotTimeMs = snap.SnapshotID, snap.TimestampMs
	tasks, err := tbl.Scan().PlanFiles(ctx)
	if err != nil {
		return fmt.Errorf("plan table %s: %w", tp.Name, err)
	}
	fs, err := tbl.FS(ctx)
	if err != nil {
		return fmt.Errorf("table %s: file io: %w", tp.Name, err)
	}
	local := func(df iceberg.DataFile) (string, error) {
		if df.FileFormat() != iceberg.ParquetFile {
			return "", fmt.Errorf("table %s: file %s is %s: only Parquet files can be read", tp.Name, df.FilePath(), df.FileFormat())
		}
		return localPath(fs, df.FilePath(), opts.FetchDir)
	}
	for _, t := range tasks {
		if len(t.DeletionVectorFiles) > 0 {
			return fmt.Errorf("table %s: data file %s has deletion vectors, which skippr query cannot apply yet", tp.Name, t.File.FilePath())
		}
		if t.Start != 0 || t.Length != 0 && t.Length < t.File.FileSizeBytes() {
			return fmt.Errorf("table %s: data file %s is split into byte ranges; skippr query reads whole files", tp.Name, t.File.FilePath())
		}
		pf := lakequery.PlanFile{Location: t.File.FilePath(), Rows: t.File.Count()}
		if pf.Path, err = local(t.File); err != nil {
			return err
		}
		for _, d := range t.DeleteFiles {
			p, err := local(d)
			if err != nil {
				return err
			}
			pf.PositionDeletes = append(pf.PositionDeletes, p)
		}
		for _, d := range t.EqualityDeleteFiles {
			p, err := local(d)
			if err != nil {
				return err
			}
			pf.EqualityDeletes = append(pf.EqualityDeletes, lakequery.EqDeletion{Path: p, FieldIDs: d.EqualityFieldIDs()})
		}
		tp.Files = append(tp.Files, pf)
	}
	return nil
}

// localPath returns a path DuckDB can open: the file itself when it is local, otherwise a copy in fetchDir
// (named by a hash of its location, so a file shared by many tasks is fetched once).
func localPath(fs iceio.IO, loc, fetchDir string) (string, error) {
	u, err := url.Parse(loc)
	if err == nil && (u.Scheme == "file" || u.Scheme == "") {
		return u.Path, nil
	}
	if fetchDir == "" {
		return "", fmt.Errorf("file %s is not on the local file system and no fetch directory was given", loc)
	}
	sum := sha256.Sum256([]byte(loc))
	dst := filepath.Join(fetchDir, hex.EncodeToString(sum[:12])+".parquet")
	if _, err := os.Stat(dst); err == nil {
		return dst, nil
	}
	src, err := fs.Open(loc)
	if err != nil {
		return "", fmt.Errorf("fetch %s: %w", loc, err)
	}
	defer src.Close()
	tmp := dst + ".part"
	f, err := os.Create(tmp)
	if err != nil {
		return "", fmt.Errorf("fetch %s: %w", loc, err)
	}
	if _, err := io.Copy(f, src); err != nil {
		f.Close()
		return "", fmt.Errorf("fetch %s: %w", loc, err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("fetch %s: %w", loc, err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		return "", fmt.Errorf("fetch %s: %w", loc, err)
	}
	return dst, nil
}
