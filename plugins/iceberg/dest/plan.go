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
}

// PlanTables plans every table of the namespace and every stream asked for.
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
	exists, err := oc.cat.CheckNamespaceExists(ctx, ns)
	if err != nil {
		return nil, fmt.Errorf("namespace %s: %w", s.Namespace, err)
	}
	if exists {
		for ident, err := range oc.cat.ListTables(ctx, ns) {
			if err != nil {
				return nil, fmt.Errorf("list tables of %s: %w", s.Namespace, err)
			}
			add(ident[len(ident)-1], ident)
		}
	}
	for i := range p.Tables {
		if err := planTable(ctx, oc.cat, idents[p.Tables[i].Name], &p.Tables[i], opts); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func planTable(ctx context.Context, cat catalog.Catalog, ident []string, tp *lakequery.TablePlan, opts PlanOptions) error {
	tbl, err := cat.LoadTable(ctx, ident)
	if errors.Is(err, catalog.ErrNoSuchTable) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("load table %s: %w", tp.Name, err)
	}
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
