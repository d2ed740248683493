// Package dest is the BigQuery destination. One apply — a range of WAL sequence numbers, since the plugin
// offers Capabilities.Coalesce — folds each stream's rows per key (change.Fold), writes the survivors to a
// fresh staging table through the Storage Write API (a pending stream, committed with
// BatchCommitWriteStreams, so the staging table holds all of them or none), and then runs one multi-statement
// transaction: ASSERT the state row still holds the fence this process read, MERGE each staging table into
// its target by key (INSERT … SELECT for a stream without a key), MERGE the state rows
// (pipeline, stream, last_sequence) of _skippr_state, COMMIT. A replay at or below the recorded sequence number
// is skipped, and a partly covered range applies only the items above it, so delivery is exactly-once: a
// crash before COMMIT leaves the target untouched (the staging table expires), one after it is a replay.
//
// README.md says why this beats the CDC default stream (_CHANGE_TYPE), and what each apply costs.
package dest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/bigquery"
	"cloud.google.com/go/bigquery/storage/managedwriter"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugin-sdk/serve"
	"github.com/skippr-dev/skippr/plugins/bigquery/gsql"
)

// Destination applies WAL ranges into BigQuery. It implements serve.SessionDestination: a session holds the
// clients of one settings value (conn).
type Destination struct {
	Version string
	Log     *slog.Logger
}

var _ serve.SessionDestination = (*Destination)(nil)

// conn is what the plugin keeps per settings: the clients, and what it learned of the dataset.
type conn struct {
	s     Settings
	bq    *bigquery.Client
	write *managedwriter.Client
	// fences holds, per pipeline, the sequence number this process last read from or wrote to the state
	// table; the transaction ASSERTs it, so a stale value fails an apply rather than corrupting one.
	fences map[string]uint64
	// tables caches target schemas by table name; dropped whenever an apply fails.
	tables       map[string]bigquery.Schema
	datasetReady bool
	stateReady   bool
}

func (d *Destination) log() *slog.Logger {
	if d.Log != nil {
		return d.Log
	}
	return slog.Default()
}

func (d *Destination) Spec() serve.Spec {
	return serve.Spec{Name: "bigquery", Version: d.Version, Kind: serve.KindDestination,
		Description:    "Google BigQuery through the Storage Write API and MERGE, exactly-once with upserts and deletes by key",
		SettingsSchema: json.RawMessage(SettingsSchema)}
}

// Open parses the settings and makes the clients the session's calls share.
func (d *Destination) Open(ctx context.Context, raw json.RawMessage) (serve.Session, error) {
	s, err := ParseSettings(raw)
	if err != nil {
		return nil, err
	}
	c, err := newConn(ctx, s)
	if err != nil {
		return nil, err
	}
	return &session{d: d, c: c}, nil
}

// session is the destination open for one settings value.
type session struct {
	d  *Destination
	mu sync.Mutex // one call at a time: it guards what conn learned
	c  *conn
}

// Close closes the clients.
func (x *session) Close() error { return x.c.close() }

func (c *conn) close() error { return errors.Join(c.write.Close(), c.bq.Close()) }

// newConn makes the clients of s.
func newConn(ctx context.Context, s Settings) (*conn, error) {
	var rest, grpcOpts []option.ClientOption
	switch {
	case s.Endpoint != "":
		u, _ := url.Parse(s.Endpoint)
		rest = append(rest, option.WithEndpoint(strings.TrimSuffix(s.Endpoint, "/")+"/bigquery/v2/"), option.WithoutAuthentication(),
			option.WithHTTPClient(http.DefaultClient))
		creds := insecure.NewCredentials()
		if u.Scheme == "https" {
			creds = credentials.NewTLS(nil)
		}
		// The clients' background work is bound to the context they are made with: the plugin's life, not
		// this call's.
		gc, err := grpc.NewClient(u.Host, grpc.WithTransportCredentials(creds))
		if err != nil {
			return nil, fmt.Errorf("endpoint %s: %w", s.Endpoint, err)
		}
		grpcOpts = append(grpcOpts, option.WithGRPCConn(gc), option.WithoutAuthentication())
	case s.CredentialsJSON != "":
		rest = append(rest, option.WithAuthCredentialsJSON(option.ServiceAccount, []byte(s.CredentialsJSON)))
		grpcOpts = rest
	case s.CredentialsFile != "":
		rest = append(rest, option.WithAuthCredentialsFile(option.ServiceAccount, s.CredentialsFile))
		grpcOpts = rest
	}
	bg := context.WithoutCancel(ctx)
	bq, err := bigquery.NewClient(bg, s.Project, rest...)
	if err != nil {
		return nil, classify(fmt.Errorf("bigquery client: %w", err), s)
	}
	if s.Location != "" {
		bq.Location = s.Location
	}
	w, err := managedwriter.NewClient(bg, s.Project, grpcOpts...)
	if err != nil {
		bq.Close()
		return nil, classify(fmt.Errorf("storage write client: %w", err), s)
	}
	return &conn{s: s, bq: bq, write: w, fences: map[string]uint64{}, tables: map[string]bigquery.Schema{}}, nil
}

func (c *conn) dataset() *bigquery.Dataset { return c.bq.Dataset(c.s.Dataset) }

func (c *conn) table(name string) gsql.Table {
	return gsql.Table{Project: c.s.Project, Dataset: c.s.Dataset, Name: name}
}

// ensureDataset creates the dataset when missing.
func (c *conn) ensureDataset(ctx context.Context) error {
	if c.datasetReady {
		return nil
	}
	_, err := c.dataset().Metadata(ctx)
	if isNotFound(err) {
		err = c.dataset().Create(ctx, &bigquery.DatasetMetadata{Location: c.s.Location})
		if isConflict(err) {
			err = nil
		}
		if err != nil {
			return classify(fmt.Errorf("create dataset %s.%s: %w", c.s.Project, c.s.Dataset, err), c.s)
		}
	} else if err != nil {
		return classify(fmt.Errorf("dataset %s.%s: %w", c.s.Project, c.s.Dataset, err), c.s)
	}
	c.datasetReady = true
	return nil
}

// ensureState creates the state table when missing.
func (c *conn) ensureState(ctx context.Context) error {
	if c.stateReady {
		return nil
	}
	if err := c.ensureDataset(ctx); err != nil {
		return err
	}
	t := c.dataset().Table(gsql.StateTable)
	_, err := t.Metadata(ctx)
	if isNotFound(err) {
		err = t.Create(ctx, &bigquery.TableMetadata{
			Description: "skippr: the last WAL sequence number applied, per pipeline (stream '') and per stream",
			Schema: bigquery.Schema{
				{Name: "pipeline", Type: "STRING", Required: true},
				{Name: "stream", Type: "STRING", Required: true},
				{Name: "last_sequence", Type: "INT64", Required: true},
			},
		})
		if isConflict(err) {
			err = nil
		}
	}
	if err != nil {
		return classify(fmt.Errorf("state table %s: %w", c.table(gsql.StateTable), err), c.s)
	}
	c.stateReady = true
	return nil
}

// query runs one statement or script with named parameters and returns its rows (for a SELECT).
func (c *conn) query(ctx context.Context, sql string, params map[string]any) ([][]bigquery.Value, error) {
	q := c.bq.Query(sql)
	for name, v := range params {
		q.Parameters = append(q.Parameters, bigquery.QueryParameter{Name: name, Value: v})
	}
	if c.s.Location != "" {
		q.Location = c.s.Location
	}
	job, err := q.Run(ctx)
	if err != nil {
		return nil, classify(err, c.s)
	}
	st, err := job.Wait(ctx)
	if err != nil {
		return nil, classify(fmt.Errorf("job %s: %w", job.ID(), err), c.s)
	}
	if err := st.Err(); err != nil {
		return nil, classify(fmt.Errorf("job %s: %w", job.ID(), err), c.s)
	}
	if !strings.HasPrefix(sql, "SELECT") {
		return nil, nil
	}
	it, err := job.Read(ctx)
	if err != nil {
		return nil, classify(fmt.Errorf("job %s: read: %w", job.ID(), err), c.s)
	}
	var out [][]bigquery.Value
	for {
		var row []bigquery.Value
		err := it.Next(&row)
		if errors.Is(err, iterator.Done) {
			return out, nil
		}
		if err != nil {
			return nil, classify(fmt.Errorf("job %s: read: %w", job.ID(), err), c.s)
		}
		out = append(out, row)
	}
}

// readState reads a pipeline's state rows; a pipeline never applied has sequence 0.
func (c *conn) readState(ctx context.Context, pipeline string) (serve.Applied, error) {
	a := serve.Applied{Streams: map[string]uint64{}}
	if err := c.ensureState(ctx); err != nil {
		return a, err
	}
	rows, err := c.query(ctx, gsql.ReadState(c.table(gsql.StateTable)), map[string]any{"pipeline": pipeline})
	if err != nil {
		return a, fmt.Errorf("read %s: %w", c.table(gsql.StateTable), err)
	}
	for _, r := range rows {
		if len(r) != 2 {
			return a, fmt.Errorf("read %s: row %v has %d columns, want 2", c.table(gsql.StateTable), r, len(r))
		}
		stream, _ := r[0].(string)
		seq, ok := r[1].(int64)
		if !ok || seq < 0 {
			return a, fmt.Errorf("read %s: last_sequence %v of stream %q is not a sequence number", c.table(gsql.StateTable), r[1], stream)
		}
		if stream == gsql.WholePipeline {
			a.Sequence = uint64(seq)
		} else {
			a.Streams[stream] = uint64(seq)
		}
	}
	c.fences[pipeline] = a.Sequence
	return a, nil
}

// Check connects, creates the dataset and the state table when missing, runs the state query (a job), and
// asks which of the table permissions an apply needs are missing, naming the role that grants them.
func (d *Destination) Check(ctx context.Context, raw json.RawMessage) error {
	s, err := ParseSettings(raw)
	if err != nil {
		return err
	}
	c, err := newConn(ctx, s)
	if err != nil {
		return err
	}
	defer c.close()
	if err := c.ensureState(ctx); err != nil {
		return err
	}
	if _, err := c.readState(ctx, "_skippr_check"); err != nil {
		return err
	}
	need := []string{"bigquery.tables.get", "bigquery.tables.getData", "bigquery.tables.updateData", "bigquery.tables.update", "bigquery.tables.delete"}
	have, err := c.dataset().Table(gsql.StateTable).IAM().TestPermissions(ctx, need)
	if err != nil {
		return classify(fmt.Errorf("test permissions on %s: %w", c.table(gsql.StateTable), err), s)
	}
	var missing []string
	for _, p := range need {
		if !contains(have, p) {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		return fault.ConfigErr(fmt.Errorf("the credentials lack %s on dataset %s.%s", strings.Join(missing, ", "), s.Project, s.Dataset),
			fmt.Sprintf("grant roles/bigquery.dataEditor on dataset %s.%s (and roles/bigquery.jobUser on project %s) to the service account", s.Project, s.Dataset, s.Project))
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Capabilities: exactly-once, deletes, added columns, truncates, and coalesced ranges (a MERGE per range
// rather than per WAL entry is what makes a warehouse affordable).
// It proposes an apply max_interval of WarehouseApplyInterval, which a connection that leaves
// apply.max_interval out takes: a caught-up pipeline then commits once a minute, not once per WAL entry.
func (d *Destination) Capabilities(_ context.Context, raw json.RawMessage) (serve.Capabilities, error) {
	if _, err := ParseSettings(raw); err != nil {
		return serve.Capabilities{}, err
	}
	return serve.Capabilities{ExactlyOnce: true, Deletes: true, SchemaEvolution: true, Truncate: true, Coalesce: true,
		ApplyDefaults: serve.ApplyDefaults{MaxInterval: WarehouseApplyInterval}}, nil
}

// WarehouseApplyInterval: each commit starts compute that bills by the minute or by the query, so a minute
// between commits bounds the cost of a trickle of changes (the README's worked example).
const WarehouseApplyInterval = time.Minute

// LastApplied reads the pipeline's state rows.
func (x *session) LastApplied(ctx context.Context, pipeline string) (serve.Applied, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.c.readState(ctx, pipeline)
}

func isNotFound(err error) bool {
	var e *googleapi.Error
	return errors.As(err, &e) && e.Code == http.StatusNotFound
}

func isConflict(err error) bool {
	var e *googleapi.Error
	return errors.As(err, &e) && e.Code == http.StatusConflict
}

// classify gives a BigQuery error its fault class: a permission error names the role that fixes it; a
// missing project names the setting; other errors stay retryable.
func classify(err error, s Settings) error {
	if err == nil {
		return nil
	}
	var ge *googleapi.Error
	if errors.As(err, &ge) {
		switch ge.Code {
		case http.StatusUnauthorized:
			return fault.ConfigErr(err, "the credentials were refused: check credentials_json / credentials_file, or the application-default login")
		case http.StatusForbidden:
			for _, e := range ge.Errors {
				if e.Reason == "rateLimitExceeded" || e.Reason == "quotaExceeded" {
					return fault.TransientErr(err)
				}
			}
			return fault.ConfigErr(err, fmt.Sprintf("grant the service account roles/bigquery.dataEditor on dataset %s.%s and roles/bigquery.jobUser on project %s", s.Project, s.Dataset, s.Project))
		}
	}
	if st, ok := status.FromError(err); ok {
		switch st.Code() {
		case codes.PermissionDenied:
			return fault.ConfigErr(err, fmt.Sprintf("grant the service account roles/bigquery.dataEditor on dataset %s.%s (the Storage Write API needs bigquery.tables.updateData)", s.Project, s.Dataset))
		case codes.Unauthenticated:
			return fault.ConfigErr(err, "the credentials were refused: check credentials_json / credentials_file, or the application-default login")
		}
	}
	return err
}
