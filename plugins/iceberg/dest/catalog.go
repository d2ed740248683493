package dest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/catalog/rest"
	sqlcat "github.com/apache/iceberg-go/catalog/sql"
	_ "github.com/apache/iceberg-go/io/gocloud/s3" // registers the s3:// FileIO
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	_ "modernc.org/sqlite" // pure-Go SQLite driver "sqlite"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
)

// openCatalog is a connected catalog and what must be closed with it.
type openCatalog struct {
	cat  catalog.Catalog
	db   *sql.DB // nil for a REST catalog
	name string  // "sql catalog PATH" or "rest catalog URI", for errors that would not say which
}

func (o *openCatalog) Close() error {
	if o.db != nil {
		return o.db.Close()
	}
	// The REST catalog holds idle HTTP connections to the server.
	if c, ok := o.cat.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// catalogName is the name the plugin gives its catalogs (in an SQL catalog, the rows' catalog_name).
const catalogName = "skippr"

// catalogPointers reads where every table of an SQL catalog points (iceberg-go's iceberg_tables: namespace,
// name, metadata location), as one string that changes whenever any table commits, is created, dropped or
// renamed: a commit always writes a new metadata file, so a location is never reused. One indexed query on
// the catalog's own database, against a LoadTable per table (a read and JSON parse of its metadata file).
func catalogPointers(ctx context.Context, db *sql.DB) (string, error) {
	rows, err := db.QueryContext(ctx, `SELECT table_namespace, table_name, metadata_location FROM iceberg_tables
		WHERE catalog_name = ? ORDER BY table_namespace, table_name`, catalogName)
	if err != nil {
		return "", fmt.Errorf("list metadata locations: %w", err)
	}
	defer rows.Close()
	var b strings.Builder
	b.WriteString("tables\x00") // an empty catalog reads as something: "" means "not read"
	for rows.Next() {
		var ns, name, loc sql.NullString
		if err := rows.Scan(&ns, &name, &loc); err != nil {
			return "", fmt.Errorf("list metadata locations: %w", err)
		}
		for _, v := range []sql.NullString{ns, name, loc} {
			if !v.Valid {
				b.WriteString("\x01") // NULL, unlike any string
			}
			b.WriteString(v.String)
			b.WriteByte(0)
		}
	}
	if err := rows.Err(); err != nil {
		return "", fmt.Errorf("list metadata locations: %w", err)
	}
	return b.String(), nil
}

// connect opens the catalog the settings name. It fails when the catalog cannot be reached, naming it.
func connect(ctx context.Context, s Settings) (*openCatalog, error) {
	props := iceberg.Properties{}
	maps.Copy(props, s.ioProps())
	switch s.Catalog.Type {
	case "sql":
		if strings.HasPrefix(s.Catalog.Warehouse, "file://") {
			dir := strings.TrimPrefix(s.Catalog.Warehouse, "file://")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return nil, fmt.Errorf("warehouse %s: %w", dir, err)
			}
		}
		if err := os.MkdirAll(filepath.Dir(s.Catalog.Path), 0o755); err != nil {
			return nil, fmt.Errorf("sql catalog %s: %w", s.Catalog.Path, err)
		}
		// WAL lets readers run beside a writer; BEGIN IMMEDIATE takes the write lock up front, so two writers
		// queue on busy_timeout instead of failing to upgrade a read lock (SQLITE_BUSY) mid-transaction.
		dsn := "file:" + s.Catalog.Path + "?_pragma=busy_timeout(30000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_txlock=immediate"
		db, err := sql.Open("sqlite", dsn)
		if err != nil {
			return nil, fmt.Errorf("sql catalog %s: %w", s.Catalog.Path, err)
		}
		if err := db.PingContext(ctx); err != nil {
			db.Close()
			return nil, fmt.Errorf("sql catalog %s: %w", s.Catalog.Path, err)
		}
		props["warehouse"] = s.Catalog.Warehouse
		cat, err := sqlcat.NewCatalog(catalogName, db, sqlcat.SQLite, props)
		if err != nil {
			db.Close()
			return nil, fmt.Errorf("sql catalog %s: %w", s.Catalog.Path, err)
		}
		return &openCatalog{cat: cat, db: db, name: "sql catalog " + s.Catalog.Path}, nil
	case "rest":
		opts := []rest.Option{rest.WithAdditionalProps(props)}
		if s.Catalog.Token != "" {
			opts = append(opts, rest.WithOAuthToken(s.Catalog.Token))
		}
		if s.Catalog.Credential != "" {
			opts = append(opts, rest.WithCredential(s.Catalog.Credential))
		}
		if s.Catalog.Warehouse != "" {
			opts = append(opts, rest.WithWarehouseLocation(s.Catalog.Warehouse))
		}
		if v := s.Catalog.SigV4; v != nil {
			opts = append(opts, rest.WithSigV4RegionSvc(v.Region, v.Service))
			// Without keys of its own, iceberg-go loads the AWS default chain when it opens the session.
			if v.AccessKeyID != "" {
				opts = append(opts, rest.WithAwsConfig(aws.Config{
					Region:      v.Region,
					Credentials: credentials.NewStaticCredentialsProvider(v.AccessKeyID, v.SecretAccessKey, v.SessionToken),
				}))
			}
		}
		cat, err := rest.NewCatalog(ctx, catalogName, s.Catalog.URI, opts...)
		if err != nil {
			return nil, restAuthErr(fmt.Errorf("rest catalog %s: %w", s.Catalog.URI, err))
		}
		// Some servers (SeaweedFS) answer /v1/config without authentication, so NewCatalog succeeds with wrong
		// keys or a wrong token. A request that needs them makes bad credentials fail here, naming the catalog.
		// A GET, not a HEAD: the server's explanation is in the body.
		if _, err := cat.LoadNamespaceProperties(ctx, s.NamespaceIdent()); err != nil && !errors.Is(err, catalog.ErrNoSuchNamespace) {
			cat.Close()
			return nil, restAuthErr(fmt.Errorf("rest catalog %s: %w", s.Catalog.URI, err))
		}
		return &openCatalog{cat: cat, name: "rest catalog " + s.Catalog.URI}, nil
	}
	return nil, fmt.Errorf("catalog type %q is not sql or rest", s.Catalog.Type)
}

// ensureNamespace creates the namespace if it is missing.
func ensureNamespace(ctx context.Context, cat catalog.Catalog, ns []string) error {
	ok, err := cat.CheckNamespaceExists(ctx, ns)
	if err != nil {
		return fmt.Errorf("namespace %s: %w", strings.Join(ns, "."), err)
	}
	if ok {
		return nil
	}
	// Parents first: catalogs with nested namespaces want them to exist.
	for i := 1; i < len(ns); i++ {
		parent := ns[:i]
		if ok, err := cat.CheckNamespaceExists(ctx, parent); err == nil && !ok {
			if err := cat.CreateNamespace(ctx, parent, nil); err != nil && !errors.Is(err, catalog.ErrNamespaceAlreadyExists) {
				return fmt.Errorf("create namespace %s: %w", strings.Join(parent, "."), err)
			}
		}
	}
	if err := cat.CreateNamespace(ctx, ns, nil); err != nil && !errors.Is(err, catalog.ErrNamespaceAlreadyExists) {
		return fmt.Errorf("create namespace %s: %w", strings.Join(ns, "."), err)
	}
	return nil
}

// restAuthErr: credentials the catalog refuses need a person, not a retry.
func restAuthErr(err error) error {
	if errors.Is(err, rest.ErrUnauthorized) || errors.Is(err, rest.ErrForbidden) {
		return fault.ConfigErr(err, "set the catalog's credentials (token, credential or sigv4 keys) to ones the catalog accepts for this warehouse")
	}
	return err
}
