package mysqltest

import (
	"testing"
)

func TestMain(m *testing.M) { Main(m) }

// TestServer checks that the server is what a CDC source needs, and that users and databases work.
func TestServer(t *testing.T) {
	db := NewDB(t)
	db.Exec(t, `CREATE TABLE t (id int PRIMARY KEY, v varchar(10)); INSERT INTO t VALUES (1, 'a'), (2, 'b')`)
	var n int
	db.QueryRow(t, []any{&n}, `SELECT count(*) FROM t`)
	if n != 2 {
		t.Fatalf("count = %d, want 2", n)
	}
	for _, c := range []struct{ name, want string }{
		{"log_bin", "1"}, {"binlog_format", "ROW"}, {"binlog_row_image", "FULL"}, {"binlog_row_metadata", "FULL"},
		{"gtid_strict_mode", "1"}, {"server_id", "1"},
	} {
		var got string
		db.QueryRow(t, []any{&got}, `SELECT @@`+c.name)
		if got != c.want {
			t.Errorf("@@%s = %q, want %q", c.name, got, c.want)
		}
	}
	var pos string
	db.QueryRow(t, []any{&pos}, `SELECT @@gtid_binlog_pos`)
	if pos == "" {
		t.Errorf("@@gtid_binlog_pos is empty after an insert: the binlog is not written")
	}
	u := db.Server.CreateUser(t, "SELECT ON `"+db.Name+"`.*")
	other := &DB{Server: db.Server, Name: db.Name}
	if err := execDSN(db.Server.DSN(db.Name, u.Name, u.Password), `SELECT 1 FROM t`); err != nil {
		t.Fatalf("user with its password: %v", err)
	}
	if err := execDSN(db.Server.DSN(other.Name, u.Name, "wrong"), `SELECT 1`); err == nil {
		t.Fatalf("a wrong password was accepted")
	}
}
