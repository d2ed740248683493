#!/usr/bin/env bash
# `make sdk-release`: the plugin SDK as a versioned source release, for authors who build plugins outside this
# repository before the module is tagged on a public host (plugin-sdk/README.md, "Depending on the SDK"):
#
#   $DIST/skippr-plugin-sdk-vX.Y.Z.tar.gz   the module's files under skippr-plugin-sdk-vX.Y.Z/, for a go.mod
#                                           `replace github.com/skippr-dev/skippr/plugin-sdk => ./skippr-plugin-sdk-vX.Y.Z`
#   $DIST/skippr-plugin-sdk-vX.Y.Z.zip      the same files as a Go module zip (paths under MODULE@vX.Y.Z/)
#   $DIST/goproxy/                          a GOPROXY folder serving that zip, its go.mod and .info:
#                                           GOPROXY=file://$DIST/goproxy,https://proxy.golang.org
#                                           GONOSUMDB=github.com/skippr-dev/skippr/plugin-sdk
#
# X.Y.Z is protocol.SDKVersion (plugin-sdk/protocol/sdkversion.go), unless SDK_VERSION overrides it. The files are
# the module's files that git tracks or would track (ignored files left out), as they are in the working tree.
#
# Then it checks both forms the way a stranger uses them: the README's worked example (its go.mod and main.go,
# unchanged but for a replace in the second case) is built in a temp dir outside the workspace with GOWORK=off
# and GOFLAGS=-mod=mod, once from the GOPROXY folder and once from the unpacked tar.gz; the SDK's own
# dependencies come from the usual proxy. SDK_RELEASE_CHECK=0 skips the check.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
go=${GO:-go}
dist=${DIST:-$root/dist}
module=github.com/skippr-dev/skippr/plugin-sdk
version=${SDK_VERSION:-$(sed -nE 's/^const SDKVersion = "([^"]+)"$/\1/p' plugin-sdk/protocol/sdkversion.go)}
[ -n "$version" ] || { echo "sdk-release: no SDKVersion in plugin-sdk/protocol/sdkversion.go" >&2; exit 1; }
version=v${version#v}
name=skippr-plugin-sdk-$version

work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
mkdir -p "$dist" "$work/src/$name" "$work/zip/$module@$version"

# The module's files; a nested module (another go.mod below plugin-sdk) would not belong to it, and there is none.
if [ "$(git ls-files -co --exclude-standard plugin-sdk | grep -c '/go.mod$')" != 1 ]; then
	echo "sdk-release: plugin-sdk holds a nested module; a module zip must leave it out" >&2; exit 1
fi
git ls-files -co --exclude-standard plugin-sdk | sed 's|^plugin-sdk/||' | while read -r f; do
	[ -f "plugin-sdk/$f" ] || continue # deleted in the working tree
	for d in "$work/src/$name" "$work/zip/$module@$version"; do
		mkdir -p "$d/$(dirname "$f")"
		cp "plugin-sdk/$f" "$d/$f"
	done
done

rm -f "$dist/$name.tar.gz" "$dist/$name.zip"
tar -C "$work/src" -czf "$dist/$name.tar.gz" "$name"
(cd "$work/zip" && zip -qrXD "$dist/$name.zip" "$module@$version")

proxy=$dist/goproxy/$module/@v
mkdir -p "$proxy"
cp "$dist/$name.zip" "$proxy/$version.zip"
cp plugin-sdk/go.mod "$proxy/$version.mod"
printf '{"Version":"%s","Time":"%s"}\n' "$version" "$(git log -1 --format=%cI 2>/dev/null || date -u +%Y-%m-%dT%H:%M:%SZ)" >"$proxy/$version.info"
printf '%s\n' "$version" >"$proxy/list"
echo "sdk-release: $dist/$name.tar.gz, $dist/$name.zip and the GOPROXY folder $dist/goproxy ($module $version)"

[ "${SDK_RELEASE_CHECK:-1}" = 0 ] && exit 0

# The README's worked example, as a stranger copies it.
example() {
	local dir=$1
	mkdir -p "$dir"
	python3 - "$root/plugin-sdk/README.md" "$dir" <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
for name in ("go.mod", "main.go"):
    m = re.search(r"<!-- example file: %s -->\n```[a-z]*\n(.*?)\n```\n" % re.escape(name), text, re.S)
    if not m:
        sys.exit("plugin-sdk/README.md has no worked example file " + name)
    open(sys.argv[2] + "/" + name, "w").write(m.group(1) + "\n")
EOF
	if ! grep -q "^	$module $version\$" "$dir/go.mod"; then
		echo "sdk-release: the README's example go.mod does not require $module $version" >&2; exit 1
	fi
}

upstream=$(GOWORK=off $go env GOPROXY)
export GOWORK=off GOFLAGS=-mod=mod
# A fresh module cache: a cached plugin-sdk@version (from another build of this script) would hide a broken zip.
# Only the SDK comes from the folder; its dependencies come through the module proxy into that cache.
export GOMODCACHE=$work/modcache

echo "sdk-release: building the README's example from the GOPROXY folder"
example "$work/viaproxy"
(cd "$work/viaproxy" && GOPROXY="file://$dist/goproxy,$upstream" GONOSUMDB=$module \
	$go mod tidy && $go build -o "$work/plugin-proxy" .)

echo "sdk-release: building the README's example against the unpacked $name.tar.gz with a replace"
example "$work/viareplace"
tar -C "$work/viareplace" -xzf "$dist/$name.tar.gz"
(cd "$work/viareplace" && $go mod edit -replace "$module=./$name" && GOPROXY=$upstream $go mod tidy && $go build -o "$work/plugin-replace" .)

for b in "$work/plugin-proxy" "$work/plugin-replace"; do
	info=$("$b" --skippr-plugin-info)
	case $info in
	*'"name":"csvsource"'*) ;;
	*) echo "sdk-release: $b --skippr-plugin-info printed $info" >&2; exit 1 ;;
	esac
done
echo "sdk-release: ok — a module outside the workspace builds against both ($module $version)"
