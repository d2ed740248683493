package bigquerytest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	bq "google.golang.org/api/bigquery/v2"
)

type job struct {
	j      *bq.Job
	schema *bq.TableSchema
	rows   []*bq.TableRow
	err    error
}

func (s *Server) insertJob(ctx context.Context, j *bq.Job) (*bq.Job, error) {
	if j.Configuration == nil || j.Configuration.Query == nil {
		return nil, errf(400, "invalid", "the stand-in runs query jobs only")
	}
	q := j.Configuration.Query
	if q.UseLegacySql != nil && *q.UseLegacySql {
		return nil, errf(400, "invalid", "the plugin must use GoogleSQL (useLegacySql: false)")
	}
	if j.JobReference == nil {
		j.JobReference = &bq.JobReference{}
	}
	if j.JobReference.JobId == "" {
		j.JobReference.JobId = newID("job_")
	}
	j.JobReference.ProjectId = s.Project
	if j.JobReference.Location == "" {
		j.JobReference.Location = "US"
	}
	s.mu.Lock()
	if old, ok := s.jobs[j.JobReference.JobId]; ok {
		s.mu.Unlock()
		return old.j, nil // an idempotent retry of jobs.insert
	}
	s.queries = append(s.queries, q.Query)
	s.mu.Unlock()

	start := time.Now()
	schema, rows, kind, err := s.run(ctx, q.Query, q.QueryParameters)
	now := time.Now()
	j.Status = &bq.JobStatus{State: "DONE"}
	if err != nil {
		j.Status.ErrorResult = &bq.ErrorProto{Reason: "invalidQuery", Message: err.Error()}
		j.Status.Errors = []*bq.ErrorProto{j.Status.ErrorResult}
	}
	j.Statistics = &bq.JobStatistics{CreationTime: start.UnixMilli(), StartTime: start.UnixMilli(), EndTime: now.UnixMilli(),
		Query: &bq.JobStatistics2{StatementType: kind}}
	j.Id = s.Project + ":US." + j.JobReference.JobId
	s.mu.Lock()
	s.jobs[j.JobReference.JobId] = &job{j: j, schema: schema, rows: rows, err: err}
	s.mu.Unlock()
	return j, nil
}

func (s *Server) getJob(id string) (*bq.Job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.jobs[id]
	if !ok {
		return nil, errf(404, "notFound", "Not found: Job %s:%s", s.Project, id)
	}
	return j.j, nil
}

func (s *Server) queryResults(id string) (*bq.GetQueryResultsResponse, error) {
	s.mu.Lock()
	j, ok := s.jobs[id]
	s.mu.Unlock()
	if !ok {
		return nil, errf(404, "notFound", "Not found: Job %s:%s", s.Project, id)
	}
	if j.err != nil {
		return nil, errf(400, "invalidQuery", "%s", j.err.Error())
	}
	return &bq.GetQueryResultsResponse{JobComplete: true, JobReference: j.j.JobReference, Schema: j.schema,
		Rows: j.rows, TotalRows: uint64(len(j.rows))}, nil
}

// run parses and executes a query or script. A script's BEGIN TRANSACTION … COMMIT TRANSACTION runs in one
// PostgreSQL transaction, rolled back when any statement fails or the script ends without COMMIT.
func (s *Server) run(ctx context.Context, script string, params []*bq.QueryParameter) (*bq.TableSchema, []*bq.TableRow, string, error) {
	stmts, err := Parse(script)
	if err != nil {
		return nil, nil, "", err
	}
	kind := string(stmts[0].Kind)
	if len(stmts) > 1 {
		kind = "SCRIPT"
	}
	for _, st := range stmts {
		for _, t := range st.Tables {
			if t.Project != s.Project {
				return nil, nil, kind, fmt.Errorf("Not found: Project %s", t.Project)
			}
			if _, err := s.getTable(t.Dataset, t.Table); err != nil {
				return nil, nil, kind, err
			}
		}
	}
	release, err := s.claim(stmts)
	if err != nil {
		return nil, nil, kind, err
	}
	defer release()
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, nil, kind, err
	}
	defer conn.Release()
	var tx pgx.Tx
	defer func() {
		if tx != nil {
			tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	var (
		schema *bq.TableSchema
		rows   []*bq.TableRow
		vars   = map[string]time.Time{}
	)
	for n, st := range stmts {
		switch st.Kind {
		case KindDeclare:
			var at time.Time
			if err := conn.QueryRow(ctx, st.Postgres).Scan(&at); err != nil {
				return nil, nil, kind, fmt.Errorf("statement %d: %w", n+1, err)
			}
			vars[st.Columns[0]] = at
			continue
		case KindBegin:
			if tx != nil {
				return nil, nil, kind, fmt.Errorf("Transaction is already started at [%d]", n+1)
			}
			if tx, err = conn.Begin(ctx); err != nil {
				return nil, nil, kind, err
			}
			continue
		case KindCommit:
			if tx == nil {
				return nil, nil, kind, fmt.Errorf("COMMIT TRANSACTION without BEGIN TRANSACTION at [%d]", n+1)
			}
			err := tx.Commit(ctx)
			tx = nil
			if err != nil {
				return nil, nil, kind, err
			}
			continue
		}
		sql, args, err := bind(st.Postgres, params, vars)
		if err != nil {
			return nil, nil, kind, err
		}
		exec := func(sql string, args ...any) error {
			if tx != nil {
				_, err := tx.Exec(ctx, sql, args...)
				return err
			}
			_, err := conn.Exec(ctx, sql, args...)
			return err
		}
		query := func(sql string, args ...any) (pgx.Rows, error) {
			if tx != nil {
				return tx.Query(ctx, sql, args...)
			}
			return conn.Query(ctx, sql, args...)
		}
		switch st.Kind {
		case KindAssert:
			r, err := query(sql, args...)
			if err != nil {
				return nil, nil, kind, fmt.Errorf("statement %d: %w", n+1, err)
			}
			ok, err := pgx.CollectExactlyOneRow(r, pgx.RowTo[*bool])
			if err != nil {
				return nil, nil, kind, fmt.Errorf("statement %d: %w", n+1, err)
			}
			if ok == nil || !*ok {
				return nil, nil, kind, fmt.Errorf("%s", st.Message)
			}
		case KindRename:
			if tx != nil {
				// "Statements supported in transactions": DDL on a permanent table is not among them.
				return nil, nil, kind, fmt.Errorf("statement %d: ALTER TABLE is not supported inside a transaction", n+1)
			}
			if err := s.renameColumn(ctx, conn.Conn(), st); err != nil {
				return nil, nil, kind, fmt.Errorf("statement %d: %w", n+1, err)
			}
		case KindRenameTable:
			if tx != nil {
				return nil, nil, kind, fmt.Errorf("statement %d: ALTER TABLE is not supported inside a transaction", n+1)
			}
			if err := s.renameTable(ctx, conn.Conn(), st); err != nil {
				return nil, nil, kind, fmt.Errorf("statement %d: %w", n+1, err)
			}
		case KindCanCast:
			if schema, rows, err = canCast(ctx, conn.Conn(), tx, st, sql, args); err != nil {
				return nil, nil, kind, fmt.Errorf("statement %d: %w", n+1, err)
			}
		case KindSelect:
			if schema, rows, err = s.selectRows(query, st, sql, args); err != nil {
				return nil, nil, kind, fmt.Errorf("statement %d: %w", n+1, err)
			}
		default:
			if err := exec(sql, args...); err != nil {
				return nil, nil, kind, fmt.Errorf("statement %d (%s): %w", n+1, st.Kind, err)
			}
		}
	}
	if tx != nil {
		return nil, nil, kind, fmt.Errorf("Transaction was not committed: the script ended inside BEGIN TRANSACTION")
	}
	return schema, rows, kind, nil
}

// claim checks the tables a script mutates against BigQuery's documented limits and marks them mutated until
// release: more than MaxTransactionTables fails the script, and a table another running script (or Mutate)
// mutates cancels it, as BigQuery cancels a conflicting transaction.
func (s *Server) claim(stmts []Statement) (release func(), err error) {
	var tables []string
	seen := map[string]bool{}
	for _, st := range stmts {
		switch st.Kind {
		case KindDelete, KindInsert, KindMerge, KindUpdate:
			k := st.Tables[0].Dataset + "." + st.Tables[0].Table
			if !seen[k] {
				seen[k] = true
				tables = append(tables, k)
			}
		}
	}
	if len(tables) > MaxTransactionTables {
		return nil, fmt.Errorf("Transaction is trying to mutate %d tables, which exceeds the limit of %d tables", len(tables), MaxTransactionTables)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range tables {
		if _, busy := s.mutating[k]; busy {
			return nil, fmt.Errorf("Transaction is aborted due to concurrent update against table %s:%s", s.Project, k)
		}
	}
	id := newID("tx_")
	for _, k := range tables {
		s.mutating[k] = id
	}
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, k := range tables {
			if s.mutating[k] == id {
				delete(s.mutating, k)
			}
		}
	}, nil
}

func (s *Server) selectRows(query func(string, ...any) (pgx.Rows, error), st Statement, sql string, args []any) (*bq.TableSchema, []*bq.TableRow, error) {
	t := st.Tables[0]
	s.mu.Lock()
	m := s.tables[t.Dataset+"."+t.Table]
	s.mu.Unlock()
	schema := &bq.TableSchema{}
	for _, c := range st.Columns {
		var f *bq.TableFieldSchema
		for _, x := range m.cols {
			if strings.EqualFold(x.Name, c) {
				f = x
			}
		}
		if f == nil {
			return nil, nil, fmt.Errorf("Unrecognized name: %s", c)
		}
		schema.Fields = append(schema.Fields, &bq.TableFieldSchema{Name: f.Name, Type: f.Type, Mode: f.Mode})
	}
	r, err := query(sql, args...)
	if err != nil {
		return nil, nil, err
	}
	defer r.Close()
	var out []*bq.TableRow
	for r.Next() {
		vals, err := r.Values()
		if err != nil {
			return nil, nil, err
		}
		row := &bq.TableRow{}
		for _, v := range vals {
			cell := &bq.TableCell{}
			switch x := v.(type) {
			case nil:
			case int64:
				cell.V = strconv.FormatInt(x, 10)
			case string:
				cell.V = x
			default:
				cell.V = fmt.Sprint(x)
			}
			row.F = append(row.F, cell)
		}
		out = append(out, row)
	}
	return schema, out, r.Err()
}

// bind numbers a statement's parameters and script variables (vars) and converts their values.
func bind(sql string, params []*bq.QueryParameter, vars map[string]time.Time) (string, []any, error) {
	var (
		args []any
		nums = map[string]int{}
		b    strings.Builder
	)
	for {
		i := strings.Index(sql, paramPrefix)
		if i < 0 {
			b.WriteString(sql)
			break
		}
		b.WriteString(sql[:i])
		rest := sql[i+len(paramPrefix):]
		j := strings.IndexByte(rest, 0)
		name := rest[:j]
		sql = rest[j+1:]
		if v, ok := strings.CutPrefix(name, varPrefix); ok {
			at, ok := vars[v]
			if !ok {
				return "", nil, fmt.Errorf("Unrecognized name: %s", v)
			}
			args = append(args, at)
			fmt.Fprintf(&b, "$%d::timestamptz", len(args))
			continue
		}
		var p *bq.QueryParameter
		for _, x := range params {
			if x.Name == name {
				p = x
			}
		}
		if p == nil || p.ParameterType == nil || p.ParameterValue == nil {
			return "", nil, fmt.Errorf("Query parameter '%s' not found", name)
		}
		n, ok := nums[name]
		var cast string
		switch p.ParameterType.Type {
		case "STRING":
			cast = "text"
		case "INT64":
			cast = "bigint"
		case "ARRAY":
			if p.ParameterType.ArrayType == nil || p.ParameterType.ArrayType.Type != "STRING" {
				return "", nil, fmt.Errorf("the stand-in takes ARRAY<STRING> parameters only (%s)", name)
			}
			cast = "text[]"
		default:
			return "", nil, fmt.Errorf("the stand-in takes no %s parameter (%s)", p.ParameterType.Type, name)
		}
		if !ok {
			var v any
			if cast == "text[]" {
				vals := []string{}
				for _, av := range p.ParameterValue.ArrayValues {
					vals = append(vals, av.Value)
				}
				v = vals
			} else {
				v = p.ParameterValue.Value
			}
			args = append(args, v)
			n = len(args)
			nums[name] = n
		}
		fmt.Fprintf(&b, "$%d::%s", n, cast)
	}
	return b.String(), args, nil
}

// canCast answers SELECT SAFE_CAST(@p AS type) IS NOT NULL AS name: SAFE_CAST is NULL where CAST would fail
// ("Conversion functions", SAFE_CAST), so the answer is false where PostgreSQL's CAST raises a data exception
// (class 22). Inside a transaction the CAST runs under a savepoint, which keeps the transaction usable.
func canCast(ctx context.Context, conn *pgx.Conn, tx pgx.Tx, st Statement, sql string, args []any) (*bq.TableSchema, []*bq.TableRow, error) {
	run := func() (bool, error) {
		var ok bool
		if tx == nil {
			return ok, conn.QueryRow(ctx, sql, args...).Scan(&ok)
		}
		sp, err := tx.Begin(ctx)
		if err != nil {
			return false, err
		}
		defer sp.Rollback(context.WithoutCancel(ctx))
		return ok, sp.QueryRow(ctx, sql, args...).Scan(&ok)
	}
	ok, err := run()
	var pe *pgconn.PgError
	if errors.As(err, &pe) && strings.HasPrefix(pe.Code, "22") {
		ok, err = false, nil
	}
	if err != nil {
		return nil, nil, err
	}
	schema := &bq.TableSchema{Fields: []*bq.TableFieldSchema{{Name: st.Columns[0], Type: "BOOLEAN", Mode: "NULLABLE"}}}
	return schema, []*bq.TableRow{{F: []*bq.TableCell{{V: strconv.FormatBool(ok)}}}}, nil
}
