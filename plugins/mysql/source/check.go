package source

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"vitess.io/vitess/go/mysql"

	"github.com/skippr-dev/skippr/plugin-sdk/fault"
	"github.com/skippr-dev/skippr/plugins/mysql/config"
)

// Check tests every precondition of reading the tables and says, for each one that fails, the statement
// that fixes it. All failures are reported at once, as one configuration error.
func Check(ctx context.Context, raw json.RawMessage) error {
	cfg, err := config.Parse(raw)
	if err != nil {
		return err
	}
	conn, err := cfg.Connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	var problems, fixes []string
	fail := func(problem, fix string) {
		problems = append(problems, problem)
		fixes = append(fixes, fix)
	}
	vars := map[string]string{}
	res, err := conn.ExecuteFetch(`SHOW GLOBAL VARIABLES WHERE Variable_name IN ('log_bin', 'binlog_format', 'binlog_row_image',
		'binlog_row_metadata', 'binlog_expire_logs_seconds', 'expire_logs_days', 'server_id', 'gtid_mode', 'binlog_row_value_options')`, 100, false)
	if err != nil {
		return cfg.Explain(err)
	}
	for _, r := range res.Rows {
		vars[strings.ToLower(r[0].ToString())] = r[1].ToString()
	}
	mariadb := isMariaDB(conn)
	if v := strings.ToUpper(vars["log_bin"]); v != "ON" && v != "1" {
		fail("the binary log is off (log_bin)", "add log_bin to the server configuration and restart the server")
	}
	if v := strings.ToUpper(vars["binlog_format"]); v != "ROW" {
		fail(fmt.Sprintf("binlog_format is %s, not ROW", v), "SET GLOBAL binlog_format = 'ROW' (and binlog_format=ROW in the server configuration)")
	}
	if v := strings.ToUpper(vars["binlog_row_image"]); v != "FULL" {
		fail(fmt.Sprintf("binlog_row_image is %s, not FULL", v), "SET GLOBAL binlog_row_image = 'FULL' (and in the server configuration)")
	}
	if v, ok := vars["binlog_row_metadata"]; ok && strings.ToUpper(v) != "FULL" {
		fail(fmt.Sprintf("binlog_row_metadata is %s, not FULL", v), "SET GLOBAL binlog_row_metadata = 'FULL' (and in the server configuration)")
	}
	if v := vars["binlog_row_value_options"]; v != "" {
		fail(fmt.Sprintf("binlog_row_value_options is %s (partial JSON updates)", v), "SET GLOBAL binlog_row_value_options = ''")
	}
	if id, _ := strconv.ParseUint(vars["server_id"], 10, 32); uint32(id) == cfg.ServerID {
		fail(fmt.Sprintf("server_id %d of the binlog client is the server's own", cfg.ServerID), "set server_id in the settings to a number no server or replica of this topology uses")
	}
	checkRetention(vars)
	if _, err := conn.ExecuteFetch("SHOW BINARY LOGS", 100_000, false); err != nil {
		grant := "BINLOG MONITOR"
		if !mariadb {
			grant = "REPLICATION CLIENT"
		}
		fail(fmt.Sprintf("user %q may not list the binary logs: %v", cfg.User, err), fmt.Sprintf("GRANT %s ON *.* TO '%s'", grant, cfg.User))
	}
	if ok, err := hasGrant(conn, "REPLICATION SLAVE", "REPLICATION REPLICA"); err == nil && !ok {
		fail(fmt.Sprintf("user %q may not read the binary log (REPLICATION SLAVE)", cfg.User), fmt.Sprintf("GRANT REPLICATION SLAVE ON *.* TO '%s'", cfg.User))
	}
	if !mariadb && cfg.SnapshotLocking == config.LockingMinimal && *cfg.Snapshot {
		if ok, err := hasGrant(conn, "RELOAD"); err == nil && !ok {
			fail(fmt.Sprintf("user %q may not take the snapshot's instant lock (RELOAD)", cfg.User), fmt.Sprintf("GRANT RELOAD ON *.* TO '%s', or set snapshot: false to stream without a snapshot", cfg.User))
		}
	}
	if !mariadb && cfg.SnapshotLocking == config.LockingNone && *cfg.Snapshot {
		fail("snapshot_locking is none, and a MySQL server gives a consistent snapshot's binlog position only under the instant FLUSH TABLES WITH READ LOCK (a lock-free watermark snapshot is not built)",
			"set snapshot_locking: minimal (GRANT RELOAD for the instant of opening the snapshot), or snapshot: false to stream without a snapshot")
	}
	// Patterns are checked as the first start expands them: each must match a table, and each table it matches is
	// checked as a named one is.
	if err := (&reader{cfg: cfg}).expandInto(conn, &cfg); err != nil {
		fail(err.Error(), fault.FixOf(err))
	}
	for _, name := range cfg.Tables {
		t, err := loadTable(conn, cfg, name)
		if err != nil {
			fail(err.Error(), fault.FixOf(err))
			continue
		}
		// The row filter, as Read checks it at start (rowfilter.go).
		r := &reader{cfg: cfg, flavor: flavorMySQL}
		if mariadb {
			r.flavor = flavorMariaDB
		}
		if err := r.checkFilter(conn, t); err != nil {
			fail(err.Error(), fault.FixOf(err))
		}
		if err := r.checkFullRow(conn, t); err != nil {
			fail(err.Error(), fault.FixOf(err))
		}
		q := "SELECT 1 FROM " + config.QuoteIdent(cfg.Database) + "." + config.QuoteIdent(name) + " LIMIT 0"
		if _, err := conn.ExecuteFetch(q, 1, false); err != nil {
			fail(fmt.Sprintf("user %q may not read table %s: %v", cfg.User, cfg.Stream(name), err), fmt.Sprintf("GRANT SELECT ON `%s`.`%s` TO '%s'", cfg.Database, name, cfg.User))
		}
	}
	if len(problems) == 0 {
		return nil
	}
	// The fixes are in the message too: a failed Check reaches the user as its message alone.
	msgs := make([]string, len(problems))
	for i := range problems {
		msgs[i] = problems[i] + " (fix: " + fixes[i] + ")"
	}
	return fault.ConfigErr(errors.New(strings.Join(msgs, "; ")), strings.Join(fixes, "; "))
}

// checkRetention warns when the server may purge the binary log within a day: a pipeline stopped longer than
// that must snapshot again.
func checkRetention(vars map[string]string) {
	secs, _ := strconv.ParseFloat(vars["binlog_expire_logs_seconds"], 64)
	if secs == 0 {
		days, _ := strconv.ParseFloat(vars["expire_logs_days"], 64)
		secs = days * 86400
	}
	if secs > 0 && secs < 86400 {
		slog.Warn("the server keeps its binary log for less than a day: a pipeline stopped longer must snapshot again",
			"binlog_expire_logs_seconds", secs, "fix", "SET GLOBAL binlog_expire_logs_seconds = 604800")
	}
}

// hasGrant reports whether SHOW GRANTS of the current user holds one of privs on *.* (or ALL PRIVILEGES).
func hasGrant(conn *mysql.Conn, privs ...string) (bool, error) {
	res, err := conn.ExecuteFetch("SHOW GRANTS FOR CURRENT_USER()", 1000, false)
	if err != nil {
		return false, err
	}
	for _, r := range res.Rows {
		g := strings.ToUpper(r[0].ToString())
		if !strings.Contains(g, " ON *.* ") {
			continue
		}
		if strings.Contains(g, "ALL PRIVILEGES") {
			return true, nil
		}
		for _, p := range privs {
			if strings.Contains(g, p) {
				return true, nil
			}
		}
	}
	return false, nil
}
