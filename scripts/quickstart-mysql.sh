#!/usr/bin/env bash
# The MySQL quickstart: a throwaway MariaDB on 127.0.0.1 (unless MYSQL_HOST is set) gets a sample schema;
# `skippr sync --once` installs the mysql and iceberg plugins from the local signed registry, snapshots the
# tables into an embedded Iceberg lake, and later streams the binary log — inserts, updates, deletes and a
# schema change — through its WAL; `skippr query` answers SQL over the lake. Run it with
# `make quickstart-mysql`. Nothing is left running.
#
# Your own server instead: set MYSQL_HOST, MYSQL_PORT, MYSQL_USER (and MYSQL_PASSWORD); it needs log_bin,
# binlog_format=ROW, binlog_row_image=FULL, binlog_row_metadata=FULL, and a user with SELECT, REPLICATION SLAVE
# and BINLOG MONITOR (MySQL: REPLICATION CLIENT). The quickstart creates the database skippr_quickstart there.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
qs="$root/quickstart-mysql"
skippr="$root/bin/skippr"
rm -rf "$qs"
mkdir -p "$qs"
export SKIPPR_HOME="$qs/home"
step() { printf '\n== %s\n' "$*"; }

# --- MariaDB --------------------------------------------------------------------------------------------
datadir=""
# The server runs under runuser, which does not pass a SIGTERM on to it: ask the server itself to shut down
# (mariadb-admin waits until it has), and signal mariadbd directly only if that did not work.
cleanup() {
	if [ -n "${server_pid:-}" ] && kill -0 "$server_pid" 2>/dev/null; then
		"$(command -v mariadb-admin || command -v mysqladmin || echo false)" --socket="$datadir/mysqld.sock" -uroot shutdown >/dev/null 2>&1 ||
			pkill -TERM -f "mariadbd --defaults-file=$datadir/my.cnf" || true
		wait "$server_pid" 2>/dev/null || true
	fi
	[ -n "$datadir" ] && rm -rf "$datadir"
}
trap cleanup EXIT
as_mysql() { if [ "$(id -u)" = 0 ]; then runuser -u mysql -- "$@"; else "$@"; fi; }
client=$(command -v mariadb || command -v mysql || true)

if [ -z "${MYSQL_HOST:-}" ]; then
	if ! command -v mariadbd >/dev/null && [ ! -x /usr/sbin/mariadbd ]; then
		if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
			step "installing MariaDB's server binaries (apt-get install mariadb-server; not started as a service)"
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mariadb-server >/dev/null
		else
			echo "quickstart-mysql: no MariaDB server binaries: apt-get install mariadb-server (as root), or set MYSQL_HOST to use yours" >&2
			exit 1
		fi
	fi
	client=$(command -v mariadb || command -v mysql)
	port=53306
	for p in $(seq 53306 53406); do (echo >"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { port=$p; break; }; done
	# Under /tmp, not the checkout: the mysql user may not be able to enter the checkout's parents.
	datadir=$(mktemp -d /tmp/skippr-quickstart-mysql.XXXXXX)
	chmod 755 "$datadir"
	step "starting a throwaway MariaDB on 127.0.0.1:$port (data in $datadir; stopped and removed at the end)"
	cat > "$datadir/my.cnf" <<CNF
[mariadbd]
datadir=$datadir/data
socket=$datadir/mysqld.sock
pid-file=$datadir/mysqld.pid
log-error=$datadir/server.log
bind-address=127.0.0.1
port=$port
skip-name-resolve=1
server_id=1
log_bin=$datadir/binlog
binlog_format=ROW
binlog_row_image=FULL
binlog_row_metadata=FULL
binlog_expire_logs_seconds=604800
character_set_server=utf8mb4
default_time_zone=+00:00
CNF
	[ "$(id -u)" = 0 ] && chown -R mysql "$datadir"
	as_mysql mariadb-install-db --defaults-file="$datadir/my.cnf" --auth-root-authentication-method=normal --skip-test-db >/dev/null
	as_mysql "$(command -v mariadbd || echo /usr/sbin/mariadbd)" --defaults-file="$datadir/my.cnf" &
	server_pid=$!
	for _ in $(seq 1 300); do "$client" --socket="$datadir/mysqld.sock" -uroot -e 'SELECT 1' >/dev/null 2>&1 && break; sleep 0.2; done
	# root over TCP from 127.0.0.1 without a password (the install made only root@localhost).
	"$client" --socket="$datadir/mysqld.sock" -uroot -e "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1'; GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION"
	export MYSQL_HOST=127.0.0.1 MYSQL_PORT=$port MYSQL_USER=root
fi
export MYSQL_PORT=${MYSQL_PORT:-3306} MYSQL_USER=${MYSQL_USER:-root}
password=""
[ -n "${MYSQL_PASSWORD:-}" ] && password=', password: "${MYSQL_PASSWORD}"'
sql() { MYSQL_PWD="${MYSQL_PASSWORD:-}" "$client" -h "$MYSQL_HOST" -P "$MYSQL_PORT" -u "$MYSQL_USER" --protocol=tcp skippr_quickstart -e "$1"; }

step "a sample schema: customers with a JSON address, orders"
MYSQL_PWD="${MYSQL_PASSWORD:-}" "$client" -h "$MYSQL_HOST" -P "$MYSQL_PORT" -u "$MYSQL_USER" --protocol=tcp -e "CREATE DATABASE IF NOT EXISTS skippr_quickstart"
sql "DROP TABLE IF EXISTS orders, customers;
CREATE TABLE customers (id int PRIMARY KEY, name varchar(100) NOT NULL, address json);
CREATE TABLE orders (id bigint PRIMARY KEY, customer_id int NOT NULL, status enum('new','paid','shipped','refunded') NOT NULL,
  amount decimal(10,2), created_at datetime(6) NOT NULL DEFAULT now(6));
INSERT INTO customers SELECT seq, concat('customer ', seq), json_object('city', elt(1 + seq % 4, 'Oslo', 'Lima', 'Pune', 'Accra')) FROM seq_1_to_1000;
INSERT INTO orders (id, customer_id, status, amount) SELECT seq, 1 + seq % 1000, elt(1 + seq % 3, 'new', 'paid', 'shipped'), (seq % 500) + 0.99 FROM seq_1_to_50000;"

# --- skippr ---------------------------------------------------------------------------------------------
cat > "$qs/skippr.yml" <<YAML
registries:
  - url: file://$root/.dev/registry
    key_files: [$root/.dev/keys/skippr-ed25519.pub]
connections:
  shop:
    plugin: mysql
    version: "~> 0.1"
    settings: { host: $MYSQL_HOST, port: $MYSQL_PORT, user: $MYSQL_USER$password, database: skippr_quickstart,
                tables: [customers, orders] }
  lake:
    plugin: iceberg
    version: "~> 0.1"
    settings: { catalog: { warehouse: $qs/lake }, namespace: shop,
                tables: { skippr_quickstart.customers: customers, skippr_quickstart.orders: orders } }
pipelines:
  shop:
    source: shop
    destinations: [lake]
    delivery: exactly-once
    wal:
      url: file://$qs/wal
      group_commit: { max_bytes: 8MiB, max_delay: 100ms }
YAML
cd "$qs"
step "skippr connect shop   (checks the server: binlog settings, grants, retention, primary keys)"
"$skippr" connect shop
step "skippr sync --once   (installs mysql + iceberg from the local registry, snapshots both tables into the lake)"
"$skippr" sync --once --progress-every 2s

step "skippr query   (duckdb is installed on first use; SQL over the lake)"
"$skippr" query "SELECT status, count(*) AS orders, sum(amount) AS revenue FROM shop.orders GROUP BY status ORDER BY revenue DESC"

step "changes in the binary log: inserts, an update, deletes, and a schema change (a column added)"
sql "INSERT INTO orders (id, customer_id, status, amount) VALUES (50001, 7, 'new', 42.00), (50002, 8, 'new', 17.50);
UPDATE orders SET status = 'refunded', amount = 0 WHERE id IN (1, 2, 3);
DELETE FROM orders WHERE id BETWEEN 10 AND 19;
ALTER TABLE orders ADD COLUMN channel varchar(10);
INSERT INTO orders (id, customer_id, status, amount, channel) VALUES (50003, 9, 'paid', 5.00, 'app');"
step "skippr sync --once   (streams the binary log from where the snapshot ended)"
"$skippr" sync --once
"$skippr" status
"$skippr" query "SELECT id, status, amount, channel FROM shop.orders WHERE id IN (1, 2, 3, 10, 50001, 50002, 50003) ORDER BY id"

step "skippr teardown shop   (MySQL holds nothing for a reader: the binary log is kept by the server's retention)"
"$skippr" teardown shop || true

echo
echo "Done. Nothing is left running (the throwaway MariaDB is stopped); everything is under $qs:"
echo "  skippr.yml (the config), wal/ (skippr's WAL), lake/ (Iceberg: catalog.db + Parquet files), home/ (installed plugins)."
