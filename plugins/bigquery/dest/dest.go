// Package dest is the BigQuery destination. One apply — a range of WAL sequence numbers, since the plugin
// offers Capabilities.Coalesce — folds each stream's rows per key (change.Fold), writes the survivors to a
// fresh staging table through the Storage Write API (the table's default stream: no CreateWriteStream quota;
// at-least-once, so every staged row carries an ordinal the statements read once), and then runs a
// multi-statement transaction per 99 tables (BigQuery's limit is 100 mutated tables): check the pipeline's
// state rows still hold what this process read, MERGE each staging table into its target by key
// (INSERT … SELECT for a stream without a key), MERGE the state rows (pipeline, stream, last_sequence) of the
// pipeline's own state table, COMMIT. Only the last transaction of a range records the pipeline's sequence
// number; the others record their streams', which a retry of the range skips. A replay at or below the
// recorded sequence number is skipped, so delivery is exactly-once: a crash before a COMMIT leaves its tables
// untouched (the staging table expires), one after it is a replay of what it committed.
//
// A stream with soft_delete, metadata_columns or history (plugin-sdk/rowmeta, decided per stream) stages each
// row's metadata with it and writes <table>_history in the same transaction (meta.go).
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
	// afterRename, when set (tests), runs after a table was renamed for a renamed stream (to: its new name);
	// an error stops the apply there, as a crash would.
	afterRename func(to string) error
	// beforeCreate, when set (tests), runs when the apply is about to create a table it found missing.
	beforeCreate func(table string)
}

var _ serve.SessionDestination = (*Destination)(nil)

// conn is what the plugin keeps per settings: the clients, and what it learned of the dataset.
type conn struct {
	s     Settings
	bq    *bigquery.Client
	write *managedwriter.Client
	// states holds, per pipeline, the state rows this process last read from or wrote to the pipeline's state
	// table; each transaction asserts their maximum, so a stale value fails an apply rather than corrupting one.
	states map[string]*state
	// tables caches target schemas by table name; dropped whenever an apply fails.
	tables       map[string]bigquery.Schema
	datasetReady bool
	stateReady   map[string]bool // per state (and fill) table name
	// fills: the pipeline's recorded fills (fill.go), read from its fill table at its first apply and after
	// a failed one, kept here in between.
	fills     map[string][]fill
	fillsRead map[string]bool
	// intents: the pipeline's recorded table renames not yet committed over (tablerename.go), read with fills.
	intents map[string]map[string]string
}

// state is what a pipeline's state rows say: the sequence number every stream holds (pipeline), and the
// streams a split range (more than maxTablesPerTransaction tables) committed beyond it before the rest.
type state struct {
	pipeline uint64
	streams  map[string]uint64
	max      uint64 // the highest of all rows: what the next transaction asserts
}

// fence is what stream holds: items at or below it are applied already.
func (st *state) fence(stream string) uint64 { return max(st.pipeline, st.streams[stream]) }

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
	return &conn{s: s, bq: bq, write: w, states: map[string]*state{}, tables: map[string]bigquery.Schema{}, stateReady: map[string]bool{}}, nil
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

// ensureState creates the pipeline's state table when missing. A new one takes the pipeline's sequence
// number from the legacy shared table (gsql.LegacyStateTable) when that holds one.
func (c *conn) ensureState(ctx context.Context, pipeline string) error {
	name := gsql.StateTable(pipeline)
	if c.stateReady[name] {
		return nil
	}
	if err := c.ensureDataset(ctx); err != nil {
		return err
	}
	t := c.dataset().Table(name)
	_, err := t.Metadata(ctx)
	if isNotFound(err) {
		err = t.Create(ctx, &bigquery.TableMetadata{
			Description: "skippr: the last WAL sequence number applied of pipeline " + pipeline + " (stream '') and per stream",
			Schema: bigquery.Schema{
				{Name: "pipeline", Type: "STRING", Required: true},
				{Name: "stream", Type: "STRING", Required: true},
				{Name: "last_sequence", Type: "INT64", Required: true},
			},
		})
		if isConflict(err) {
			err = nil
		} else if err == nil {
			err = c.migrateLegacy(ctx, pipeline)
		}
	}
	if err != nil {
		return classify(fmt.Errorf("state table %s: %w", c.table(name), err), c.s)
	}
	c.stateReady[name] = true
	return nil
}

// migrateLegacy writes the pipeline's sequence number from the legacy shared state table, if there is one,
// into its new state table. Its stream rows are not needed: before 0.2 every range committed whole, so no
// stream holds more than the pipeline.
func (c *conn) migrateLegacy(ctx context.Context, pipeline string) error {
	legacy := c.table(gsql.LegacyStateTable)
	if _, err := c.dataset().Table(gsql.LegacyStateTable).Metadata(ctx); isNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	rows, err := c.query(ctx, gsql.ReadState(legacy), map[string]any{"pipeline": pipeline})
	if err != nil {
		return fmt.Errorf("read %s: %w", legacy, err)
	}
	var seq int64
	for _, r := range rows {
		if len(r) == 2 && r[0] == gsql.WholePipeline {
			seq, _ = r[1].(int64)
		}
	}
	if seq <= 0 {
		return nil
	}
	_, err = c.query(ctx, gsql.SetState(c.table(gsql.StateTable(pipeline))), map[string]any{
		"pipeline": pipeline, "sequence": seq, "streams": []string{gsql.WholePipeline}})
	return err
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
	if err := c.ensureState(ctx, pipeline); err != nil {
		return a, err
	}
	table := c.table(gsql.StateTable(pipeline))
	rows, err := c.query(ctx, gsql.ReadState(table), map[string]any{"pipeline": pipeline})
	if err != nil {
		return a, fmt.Errorf("read %s: %w", table, err)
	}
	st := &state{streams: map[string]uint64{}}
	for _, r := range rows {
		if len(r) != 2 {
			return a, fmt.Errorf("read %s: row %v has %d columns, want 2", table, r, len(r))
		}
		stream, _ := r[0].(string)
		seq, ok := r[1].(int64)
		if !ok || seq < 0 {
			return a, fmt.Errorf("read %s: last_sequence %v of stream %q is not a sequence number", table, r[1], stream)
		}
		st.max = max(st.max, uint64(seq))
		if stream == gsql.WholePipeline {
			st.pipeline = uint64(seq)
		} else {
			st.streams[stream] = uint64(seq)
		}
	}
	a.Sequence = st.pipeline
	for k, v := range st.streams {
		a.Streams[k] = v
	}
	c.states[pipeline] = st
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
	if _, err := c.readState(ctx, checkPipeline); err != nil {
		return err
	}
	need := []string{"bigquery.tables.get", "bigquery.tables.getData", "bigquery.tables.updateData", "bigquery.tables.update", "bigquery.tables.delete"}
	have, err := c.dataset().Table(gsql.StateTable(checkPipeline)).IAM().TestPermissions(ctx, need)
	if err != nil {
		return classify(fmt.Errorf("test permissions on %s: %w", c.table(gsql.StateTable(checkPipeline)), err), s)
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

// checkPipeline is the pipeline name Check reads the state of, which makes its state table: a table the
// permission test can name.
const checkPipeline = "_skippr_check"

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
		RenamedStream: true, ApplyDefaults: serve.ApplyDefaults{MaxInterval: WarehouseApplyInterval}}, nil
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

// classify gives a BigQuery error its fault class. BigQuery's error table ("Troubleshoot errors") says which
// errors a retry can fix: 5xx (backendError, internalError), rateLimitExceeded and quotaExceeded, and a
// transaction cancelled by a concurrent one on the same table ("Conflicting transactions are cancelled"), or
// one whose state fence moved. A 400 (invalid, invalidQuery) is permanent: the same request fails the same
// way, so it is a config fault naming the fix rather than a retry loop. 404 and 412 stay retryable: a table
// just created or patched may not be visible everywhere yet, and a lost etag race re-reads.
func classify(err error, s Settings) error {
	if err == nil {
		return nil
	}
	var fe *fault.Error
	if errors.As(err, &fe) {
		return err
	}
	msg := err.Error()
	if strings.Contains(msg, "concurrent update") || strings.Contains(msg, gsql.FenceMoved) {
		return fault.TransientErr(err)
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
		case http.StatusBadRequest:
			return fault.ConfigErr(err, fmt.Sprintf("BigQuery refuses this request for dataset %s.%s as it stands (400: %s): change the table or column it names, or the dataset's settings; retrying sends the same request", s.Project, s.Dataset, reason(ge)))
		}
	}
	var je *bigquery.Error
	if errors.As(err, &je) && (je.Reason == "invalid" || je.Reason == "invalidQuery") {
		return fault.ConfigErr(err, fmt.Sprintf("BigQuery refuses the apply's statements in dataset %s.%s (%s): change the table or column the message names; retrying runs the same statements", s.Project, s.Dataset, je.Reason))
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

func reason(ge *googleapi.Error) string {
	for _, e := range ge.Errors {
		if e.Reason != "" {
			return e.Reason
		}
	}
	return "invalid"
}
