#!/usr/bin/env bash
# `make release`: the core binary and every plugin for linux/darwin × amd64/arm64, published into a signed
# registry folder ($DIST/registry), then checked the way a user's machine sees it: installing each plugin from that
# registry must write a skippr.lock that records the sha256 of every platform built (the cross-platform lock is only
# real if those builds exist).
#
# Static, stripped builds: CGO_ENABLED=0 (the core's cgo came only from `net` and `os/user`, whose pure-Go
# versions do the same for us) and -ldflags "-s -w". duckdb links DuckDB's C++ library through cgo, so it is built
# for this machine's platform only (cross-compiling it needs a C++ cross toolchain per target).
#
# Environment: VERSION (core version), DIST (output, default dist/), RELEASE_PLATFORMS ("os/arch …"), PLUGINS,
# CORE_TAGS, PLUGIN_TAGS and CORE_MAX_BYTES (the Makefile's),
# RELEASE_KEY (private key that signs the registry; default the development key of `make registry`).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
go=${GO:-go}
version=${VERSION:-0.1.0-dev}
dist=${DIST:-$root/dist}
platforms=${RELEASE_PLATFORMS:-linux/amd64 linux/arm64 darwin/amd64 darwin/arm64}
plugins=${PLUGINS:-datagen testdest http postgres iceberg duckdb}
cgo_plugins=" ${CGO_PLUGINS:-duckdb} "
core_tags=${CORE_TAGS:?set CORE_TAGS as make release does}
plugin_tags=${PLUGIN_TAGS-grpcnotrace duckdb_arrow}
key=${RELEASE_KEY:-$root/.dev/keys/skippr-ed25519.key}
# Issue #20: the static stripped core stays under 25 MB (the Makefile's CORE_MAX_BYTES); 23.4 MB on linux/amd64
# when this was set (BENCHMARKS.md, "Binary size").
max_core_bytes=${CORE_MAX_BYTES:?set CORE_MAX_BYTES as make release does}
host=$($go env GOOS)/$($go env GOARCH)
ldflags="-s -w"

say() { printf '== %s\n' "$*"; }
pub="${key%.key}.pub"

rm -rf "$dist" && mkdir -p "$dist"
registry="$dist/registry"
say "release $version: core + plugins ($plugins) for $platforms into $dist"
say "a cold build compiles every dependency once per platform: expect several minutes per platform on 2 cores (iceberg is the largest)"

# Host builds first: their --skippr-plugin-info gives the version, protocols and kind published for every platform.
build() { # os arch out pkgdir cgo tags extra-ldflags
	local os=$1 arch=$2 out=$3 dir=$4 cgo=$5 tags=${6:-} extra=${7:-}
	(cd "$dir" && CGO_ENABLED=$cgo GOOS=$os GOARCH=$arch $go build -trimpath -tags "$tags" -ldflags "$ldflags$extra" -o "$out" .)
}
ordered="$host"
for pf in $platforms; do [ "$pf" = "$host" ] || ordered="$ordered $pf"; done
n=$(wc -w <<<"$ordered")
i=0
for pf in $ordered; do
	i=$((i + 1))
	os=${pf%/*} arch=${pf#*/}
	out="$dist/${os}_${arch}"
	mkdir -p "$out"
	start=$(date +%s)
	say "[$i/$n] $pf: skippr"
	build "$os" "$arch" "$out/skippr" ./cmd/skippr 0 "$core_tags" " -X main.version=$version"
	size=$(stat -c %s "$out/skippr")
	if [ "$size" -gt "$max_core_bytes" ]; then
		echo "release: $out/skippr is $size bytes, over the limit of $max_core_bytes: find what grew with \`go tool nm -size -sort size\` or \`go version -m\`" >&2
		exit 1
	fi
	# The Flight SQL server `skippr serve` runs (cmd/internal/servecli: why it is not in the core), beside it.
	build "$os" "$arch" "$out/skippr-serve" ./cmd/skippr-serve 0 "$core_tags" " -X main.version=$version"
	for p in $plugins; do
		cgo=0
		if [[ "$cgo_plugins" == *" $p "* ]]; then
			if [ "$pf" != "$host" ]; then
				echo "   $p: needs cgo (DuckDB's C++ library): built for $host only"
				continue
			fi
			cgo=1
		fi
		echo "   $pf: skippr-plugin-$p"
		build "$os" "$arch" "$out/skippr-plugin-$p" "plugins/$p" "$cgo" "$plugin_tags"
	done
	echo "   $pf done in $(($(date +%s) - start))s (skippr $((size >> 20)) MiB)"
done

say "publishing into $registry"
skippr="$dist/${host%/*}_${host#*/}/skippr"
if [ ! -f "$key" ]; then
	echo "   no signing key at $key: making a development key (set RELEASE_KEY for a real release)"
	"$skippr" registry keygen --out "$(dirname "$key")" >/dev/null
fi
for p in $plugins; do
	info=$("$dist/${host%/*}_${host#*/}/skippr-plugin-$p" --skippr-plugin-info)
	v=$(jq -r .version <<<"$info")
	kind=$(jq -r .kind <<<"$info")
	protos=$(jq -r '.protocol_versions[] | "--protocol \(.)"' <<<"$info")
	for pf in $ordered; do
		bin="$dist/${pf%/*}_${pf#*/}/skippr-plugin-$p"
		[ -f "$bin" ] || continue
		# shellcheck disable=SC2086
		"$skippr" registry add "$registry" "$bin" --name "$p" --version "$v" --os "${pf%/*}" --arch "${pf#*/}" --kind "$kind" $protos --quiet >/dev/null
	done
done
"$skippr" registry sign "$registry" --key "$key"

say "checking: a lock written from this registry records every platform's sha256"
check=$(mktemp -d)
trap 'rm -rf "$check"' EXIT
: >"$check/skippr.yml"
for p in $plugins; do
	if ! SKIPPR_HOME="$check/home" "$skippr" -c "$check/skippr.yml" plugin install "$p" --registry "file://$registry" --key "$pub" >"$check/install.log" 2>&1; then
		cat "$check/install.log" >&2
		exit 1
	fi
	want=$(for pf in $ordered; do if [ -f "$dist/${pf%/*}_${pf#*/}/skippr-plugin-$p" ]; then echo "${pf%/*}_${pf#*/}"; fi; done | sort | tr '\n' ' ')
	got=$(jq -r --arg p "$p" '.plugins[$p].sha256 | keys[]' "$check/skippr.lock" | sort | tr '\n' ' ')
	if [ "$want" != "$got" ]; then
		echo "release: skippr.lock records $p for [$got], built for [$want]" >&2
		exit 1
	fi
	echo "   $p: $got"
done
say "release: $dist (registry file://$registry, public key $pub)"
