#!/usr/bin/env bash
# The quickstart: a real sync from a deterministic source through the WAL into a destination, with the plugins
# installed from a local signed registry exactly as users install them. Run it with `make quickstart`.
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
  out:
    plugin: testdest
    version: "~> 0.1"
    settings: { dir: $qs/out }
pipelines:
  orders:
    source: gen
    destinations: [out]
    delivery: exactly-once
    wal:
      url: file://$qs/wal
YAML

cd "$qs"
echo "== skippr discover gen   (installs datagen from the local registry on first use)"
"$skippr" discover gen
echo
echo "== skippr sync --once    (datagen → WAL → testdest, exactly-once)"
"$skippr" sync --once --progress-every 1s
echo
echo "== skippr status"
"$skippr" status
echo
echo "== skippr plugin list"
"$skippr" plugin list
echo
echo "== the destination's apply log: $(wc -c < "$qs/out/applied.log") bytes in $qs/out/applied.log"
echo "Done. Nothing is left running; everything is under $qs (delete it to start over)."
