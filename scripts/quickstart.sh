#!/usr/bin/env bash
# The quickstart: the whole product on one machine. A Postgres (a throwaway one on 127.0.0.1 unless PGHOST is
# set) gets a sample schema with nested JSON; `skippr sync` installs the plugins from a local signed registry on
# first use, snapshots the tables into an embedded Iceberg lake (SQLite catalog + local Parquet files), then
# streams inserts, updates and deletes through its WAL; `skippr query` answers SQL over the lake plus the rows
# that just arrived; `skippr serve` answers the same over Arrow Flight SQL. Run it with `make quickstart`.
# Nothing is left running.
#
# Your own Postgres instead of the throwaway one: set PGHOST, PGPORT, PGUSER, PGDATABASE (and PGPASSWORD);
# it needs wal_level=logical and a user with REPLICATION. The quickstart creates tables qs_customers and
# qs_orders there and drops its replication slot at the end.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
qs="$root/quickstart"
skippr="$root/bin/skippr"
rm -rf "$qs"
mkdir -p "$qs"
export SKIPPR_HOME="$qs/home"
step() { printf '\n== %s\n' "$*"; }

# --- Postgres -------------------------------------------------------------------------------------------
pgbin=""
cleanup() {
	if [ -n "${sync_pid:-}" ] && kill -0 "$sync_pid" 2>/dev/null; then kill -TERM "$sync_pid"; wait "$sync_pid" || true; fi
	if [ -n "${serve_pid:-}" ] && kill -0 "$serve_pid" 2>/dev/null; then kill -TERM "$serve_pid"; wait "$serve_pid" || true; fi
	if [ -n "${pgdata:-}" ]; then
		[ -f "$pgdata/postmaster.pid" ] && as_pg "$pgbin/pg_ctl" -D "$pgdata" stop -m fast >/dev/null || true
		rm -rf "$pgdata"
	fi
}
trap cleanup EXIT
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

if [ -z "${PGHOST:-}" ]; then
	pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
	if [ -z "$pgbin" ]; then
		if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
			step "installing PostgreSQL's server binaries (apt-get install postgresql)"
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null
			pgbin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
		else
			echo "quickstart: no PostgreSQL server binaries: apt-get install postgresql (as root), or set PGHOST to use yours" >&2
			exit 1
		fi
	fi
	# Under /tmp, not the checkout: the postgres user may not be able to enter the checkout's parents.
	pgdata=$(mktemp -d /tmp/skippr-quickstart-pg.XXXXXX)
	step "starting a throwaway Postgres on 127.0.0.1 (data in $pgdata; stopped and removed at the end)"
	[ "$(id -u)" = 0 ] && chown postgres "$pgdata"
	as_pg "$pgbin/initdb" -D "$pgdata" -U postgres --auth=trust >/dev/null
	# A free port: nothing answers on it, and the server can bind it (a port can be taken without a listener: the
	# local end of some other connection), so a failed start tries the next one.
	port=""
	for p in $(seq 55432 55532); do
		(echo >"/dev/tcp/127.0.0.1/$p") 2>/dev/null && continue
		if as_pg "$pgbin/pg_ctl" -D "$pgdata" -l "$pgdata/log" -w -o "-c listen_addresses=127.0.0.1 -p $p -c unix_socket_directories=$pgdata -c wal_level=logical -c max_wal_senders=4 -c max_replication_slots=4" start >/dev/null; then
			port=$p
			break
		fi
		grep -q "Address already in use" "$pgdata/log" 2>/dev/null || { tail -20 "$pgdata/log" >&2; exit 1; }
		: >"$pgdata/log"
	done
	[ -n "$port" ] || { echo "quickstart: no free port for Postgres in 55432-55532" >&2; exit 1; }
	export PGHOST=127.0.0.1 PGPORT=$port PGUSER=postgres PGDATABASE=postgres
	psql() { "$pgbin/psql" "$@"; }
fi
password=""
[ -n "${PGPASSWORD:-}" ] && password=', password: "${PGPASSWORD}"'
export PGPORT=${PGPORT:-5432} PGUSER=${PGUSER:-postgres} PGDATABASE=${PGDATABASE:-postgres}
sql() { psql -X -q -v ON_ERROR_STOP=1 -c "$1"; }

step "a sample schema: customers with a nested JSON address, orders with JSON line items"
sql "DROP TABLE IF EXISTS qs_orders, qs_customers;
CREATE TABLE qs_customers (id int PRIMARY KEY, name text NOT NULL, address jsonb);
CREATE TABLE qs_orders (id bigint PRIMARY KEY, customer_id int NOT NULL, status text NOT NULL, amount numeric(10,2),
  items jsonb, tags text[], created_at timestamptz NOT NULL DEFAULT now());
INSERT INTO qs_customers SELECT i, 'customer ' || i,
  jsonb_build_object('city', (ARRAY['Oslo','Lima','Pune','Accra'])[1 + i % 4], 'geo', jsonb_build_object('lat', i % 90, 'lon', i % 180))
  FROM generate_series(1, 1000) i;
INSERT INTO qs_orders (id, customer_id, status, amount, items, tags)
  SELECT i, 1 + i % 1000, (ARRAY['new','paid','shipped'])[1 + i % 3], (i % 500) + 0.99,
  jsonb_build_array(jsonb_build_object('sku', 'sku-' || (i % 50), 'qty', 1 + i % 4)), ARRAY['web', 'promo-' || (i % 5)]
  FROM generate_series(1, 50000) i;"

# --- skippr ---------------------------------------------------------------------------------------------
config() {
	cat > "$qs/skippr.yml" <<YAML
registries:
  - url: file://$root/.dev/registry
    key_files: [$root/.dev/keys/skippr-ed25519.pub]
connections:
  shop:
    plugin: postgres
    version: "~> 0.1"
    settings: { host: $PGHOST, port: $PGPORT, user: $PGUSER, database: $PGDATABASE, sslmode: disable$password,
                tables: [public.qs_customers, public.qs_orders], slot: skippr_quickstart, publication: skippr_quickstart }
  lake:
    plugin: iceberg
    version: "~> 0.1"
    settings: { catalog: { warehouse: $qs/lake }, namespace: shop,
                tables: { public.qs_customers: customers, public.qs_orders: orders } }
pipelines:
  shop:
    source: shop
    destinations: [lake]
    delivery: exactly-once
    apply: { paused: $1 }
    wal:
      url: file://$qs/wal
      group_commit: { max_bytes: 8MiB, max_delay: 100ms }
YAML
}
cd "$qs"
config false
step "skippr sync --once   (installs postgres + iceberg from the local registry, snapshots both tables into the lake)"
"$skippr" sync --once --progress-every 2s

step "skippr query   (duckdb is installed on first use; SQL over the lake)"
"$skippr" query "SELECT c.address->>'\$.city' AS city, count(*) AS orders, sum(o.amount) AS revenue
  FROM shop.orders o JOIN shop.customers c ON c.id = o.customer_id GROUP BY city ORDER BY revenue DESC"

step "streaming with apply paused: changes land in the WAL, the lake does not have them yet"
config true
"$skippr" --log-level warn sync &
sync_pid=$!
sleep 2
sql "INSERT INTO qs_orders (id, customer_id, status, amount, items, tags) VALUES
  (50001, 7, 'new', 42.00, '[{\"sku\": \"sku-new\", \"qty\": 2}]', ARRAY['app']),
  (50002, 8, 'new', 17.50, '[{\"sku\": \"sku-new\", \"qty\": 1}]', ARRAY['app']);
UPDATE qs_orders SET status = 'refunded', amount = 0 WHERE id IN (1, 2, 3);
DELETE FROM qs_orders WHERE id BETWEEN 10 AND 19;
UPDATE qs_customers SET address = jsonb_set(address, '{city}', '\"Quito\"') WHERE id = 7;"
sleep 2
q="SELECT id, status, amount, items->>'\$[0].sku' AS first_sku FROM shop.orders WHERE id IN (1, 2, 3, 10, 50001, 50002) ORDER BY id"
echo "$q"
step "skippr query --as-of-lake   (the lake alone: the old rows)"
"$skippr" query --as-of-lake "$q"
step "skippr query   (lake + the WAL's just-arrived rows: updates, deletes and inserts visible at once)"
"$skippr" query "$q"
"$skippr" query --format csv "SELECT id, address->>'\$.city' AS city FROM shop.customers WHERE id = 7"

step "resume apply: skippr sync --once commits the WAL to the lake"
kill -TERM "$sync_pid"; wait "$sync_pid" || true; sync_pid=""
config false
"$skippr" sync --once
"$skippr" status
step "skippr query --as-of-lake   (the lake now has them)"
"$skippr" query --as-of-lake "$q"

step "skippr serve   (the same answers as a long-running Arrow Flight SQL server: plugins start once)"
"$skippr" serve --addr 127.0.0.1:0 2>"$qs/serve.log" &
serve_pid=$!
addr=""
for _ in $(seq 1 600); do
	addr=$(sed -nE 's/.*msg="serving Flight SQL" addr=([^ ]+).*/\1/p' "$qs/serve.log" | head -1)
	[ -n "$addr" ] && break
	kill -0 "$serve_pid" 2>/dev/null || { cat "$qs/serve.log" >&2; exit 1; }
	sleep 0.1
done
[ -n "$addr" ] || { echo "quickstart: skippr serve did not start within a minute:" >&2; cat "$qs/serve.log" >&2; exit 1; }
echo "serving Flight SQL on grpc://$addr (log: $qs/serve.log)"
step "skippr query --server $addr   (the statement goes to the server over Flight; no plugin starts)"
"$skippr" query --server "$addr" "$q"
echo "A notebook connects the same way: adbc_driver_flightsql.dbapi.connect(\"grpc://$addr\") (README.md, \"Serving it\")."
kill -TERM "$serve_pid"; wait "$serve_pid" || true; serve_pid=""

step "skippr teardown shop   (drops the replication slot so Postgres does not keep WAL for it)"
"$skippr" teardown shop

echo
echo "Done. Nothing is left running (the throwaway Postgres is stopped); everything is under $qs:"
echo "  skippr.yml (the config), wal/ (skippr's WAL), lake/ (Iceberg: catalog.db + Parquet files), home/ (installed plugins)."
echo "Try: cd $qs && SKIPPR_HOME=$qs/home $skippr query     (an interactive prompt over the lake)"
echo " or: cd $qs && SKIPPR_HOME=$qs/home $skippr serve     (the same over Arrow Flight SQL on 127.0.0.1:31337 for notebooks"
echo "     and BI tools; then skippr query --server 127.0.0.1:31337 answers through it; README.md, \"Serving it\")"
