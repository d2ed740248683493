package dest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugins/snowflake/sfsql"
)

// Check logs in and tries, in the session, each thing an apply does: use the warehouse, the database and the
// schema, create the state table, put a file to its stage and remove it. Each failure is reported with the
// GRANT that fixes it, all of them at once. Trying is more faithful than reading SHOW GRANTS, which lists a
// role's own grants but not those it inherits.
func (d *Destination) Check(ctx context.Context, raw json.RawMessage) error {
	s, err := ParseSettings(raw)
	if err != nil {
		return err
	}
	p, err := pool(s)
	if err != nil {
		return err
	}
	defer p.Close()
	d.mu.Lock()
	defer d.mu.Unlock()
	x, err := d.conn(ctx, s, p)
	if err != nil {
		return err
	}
	defer x.close()
	role := s.Role
	if role == "" {
		rows, err := x.query(ctx, "SELECT CURRENT_ROLE()")
		if err != nil {
			return explain(s, "read the current role", err)
		}
		for rows.Next() {
			_ = rows.Scan(&role)
		}
		rows.Close()
	}
	db, schema := sfsql.Name(s.Database), sfsql.Name(s.Schema)
	to := " TO ROLE " + sfsql.Ident(role)
	var missing, grants []string
	probe := func(q, what, grant string) bool {
		if err := x.exec(ctx, q); err != nil {
			missing = append(missing, fmt.Sprintf("%s (%v)", what, err))
			grants = append(grants, grant)
			return false
		}
		return true
	}
	probe(sfsql.UseWarehouse(s.Warehouse), "use of warehouse "+s.Warehouse,
		"GRANT USAGE ON WAREHOUSE "+sfsql.Ident(s.Warehouse)+to)
	ok := probe(sfsql.UseDatabase(db), "use of database "+db, "GRANT USAGE ON DATABASE "+sfsql.Ident(db)+to)
	ok = ok && probe(sfsql.UseSchema(db, schema), "use of schema "+db+"."+schema,
		"GRANT USAGE ON SCHEMA "+sfsql.Ident(db)+"."+sfsql.Ident(schema)+to)
	if ok && probe(sfsql.CreateState(db, schema), "creating tables in "+db+"."+schema,
		"GRANT CREATE TABLE ON SCHEMA "+sfsql.Ident(db)+"."+sfsql.Ident(schema)+to) {
		if err := x.probeStage(ctx); err != nil {
			state := x.table(sfsql.StateTable)
			missing = append(missing, fmt.Sprintf("writing to the stage of %s (%v)", state, err))
			grants = append(grants, "GRANT OWNERSHIP ON TABLE "+state.String()+to+" COPY CURRENT GRANTS")
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fault.ConfigErr(fmt.Errorf("snowflake role %s lacks: %s", role, strings.Join(missing, "; ")),
		"run as an administrator: "+strings.Join(grants, "; "))
}

// probeStage puts a small file to the state table's stage and removes it: what every apply does with its
// table's stage.
func (x *conn) probeStage(ctx context.Context) error {
	dir, err := os.MkdirTemp(x.d.TempDir, "skippr-snowflake-check-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	f := filepath.Join(dir, "skippr_check.txt")
	if err := os.WriteFile(f, []byte("skippr check\n"), 0o600); err != nil {
		return err
	}
	t := x.table(sfsql.StateTable)
	return errors.Join(x.exec(ctx, sfsql.Put(f, t)), x.exec(ctx, sfsql.RemoveFile(t, filepath.Base(f))))
}
