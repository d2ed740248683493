#!/usr/bin/env bash
# The quickstart: a real sync from a deterministic source (inserts, updates, deletes, nested columns) through
# the WAL into an embedded Iceberg lake (SQLite catalog + local Parquet files), with the plugins installed from
# a local signed registry exactly as users install them; then the lake is read back. Run it with
# `make quickstart`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
qs="$root/quickstart"
skippr="$root/bin/skippr"
rm -rf "$qs"
mkdir -p "$qs"
export SKIPPR_HOME="$qs/home"

cat > "$qs/skippr.yml" <<YAML
registries:
  - url: file://$root/.dev/registry
    key_files: [$root/.dev/keys/skippr-ed25519.pub]
connections:
  gen:
    plugin: datagen
    version: "~> 0.1"
    settings: { seed: 42, rows: 200000, batch_size: 5000, nested: true, update_ratio: 0.2, delete_ratio: 0.05 }
  lake:
    plugin: iceberg
    version: "~> 0.1"
    settings: { catalog: { warehouse: $qs/lake }, namespace: quickstart }
pipelines:
  orders:
    source: gen
    destinations: [lake]
    delivery: exactly-once
    wal:
      url: file://$qs/wal
YAML

cd "$qs"
echo "== skippr discover gen   (installs datagen from the local registry on first use)"
"$skippr" discover gen
echo
echo "== skippr sync --once    (datagen → WAL → Iceberg, exactly-once)"
"$skippr" sync --once --progress-every 1s
echo
echo "== skippr status"
"$skippr" status
echo
echo "== skippr plugin list"
"$skippr" plugin list
echo
echo "== the lake: table quickstart.events, current snapshot with deletes applied (first 5 rows as JSON)"
plugin=$(ls "$SKIPPR_HOME"/plugins/iceberg/*/skippr-plugin-iceberg | head -1)
echo '{"catalog": {"warehouse": "'"$qs/lake"'"}, "namespace": "quickstart"}' | "$plugin" scan events > "$qs/events.jsonl"
head -5 "$qs/events.jsonl"
echo "... $(wc -l < "$qs/events.jsonl") rows in the lake (Parquet files under $qs/lake); SQL over lake + WAL (skippr query) is the next milestone"
echo "Done. Nothing is left running; everything is under $qs (delete it to start over)."
