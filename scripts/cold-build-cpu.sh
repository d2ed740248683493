#!/usr/bin/env bash
# Where a cold build's CPU goes (BENCHMARKS.md, "Cold build of what the quickstart runs"): runs `make build` with
# an empty build cache (modules must be downloaded already, or their download is in the wall time only) and every
# compile, asm and link timed on its own, user + sys, through -toolexec. Prints the total, the CPU-seconds per
# module and tool, and the packages compiled more than once (the same import path built in two configurations).
# CPU-seconds move with the machine's load far less than wall time; report the load beside them.
#
# Usage: scripts/cold-build-cpu.sh [make arguments, e.g. PLUGINS="postgres iceberg duckdb"]
# It is its own -toolexec wrapper: with COLD_BUILD_LOG set it runs the tool named by its arguments.
set -euo pipefail
if [ -n "${COLD_BUILD_LOG:-}" ]; then
	tool=$(basename "$1") pkg="" prev=""
	for a in "$@"; do
		[ "$a" = -V=full ] && exec "$@" # the go command asking a tool's version: not a build step
		[ "$prev" = -p ] && pkg=$a
		prev=$a
	done
	case $tool in
	compile | asm | link) exec /usr/bin/time -f "$tool ${pkg:-main} %U %S" -a -o "$COLD_BUILD_LOG" "$@" ;;
	*) exec "$@" ;;
	esac
fi
command -v /usr/bin/time >/dev/null || { echo "cold-build-cpu: needs /usr/bin/time (apt-get install time)" >&2; exit 1; }
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
: >"$work/tools.log"
export GOCACHE="$work/cache" COLD_BUILD_LOG="$work/tools.log"
export GOFLAGS="${GOFLAGS:-} -toolexec=$root/scripts/cold-build-cpu.sh"
/usr/bin/time -f "%U %S %e" -o "$work/total" make -C "$root" --no-print-directory build BIN="$work/bin" "$@"
read -r user sys wall <"$work/total"
echo "== make build: $(awk -v u="$user" -v s="$sys" 'BEGIN{printf "%.1f", u+s}') CPU-s, ${wall} s wall; load: $(cut -d' ' -f1-3 /proc/loadavg)"
awk '
	function mod(p,  n, a) {
		n = split(p, a, "/")
		if (a[1] !~ /\./) return "std"
		if (p ~ /^github.com\/aws\/aws-sdk-go-v2\/service\//) return a[1] "/" a[2] "/" a[3] "/" a[4] "/" a[5]
		if (a[1] ~ /^(github.com|golang.org|go.etcd.io)$/) return a[1] "/" a[2] "/" a[3]
		return a[1] "/" a[2]
	}
	{ c = $3 + $4; total += c; bytool[$1] += c; m = ($1 == "link") ? "(links)" : mod($2); bymod[m] += c
	  if ($1 == "compile" && $2 != "main") { if (seen[$2]++) { again += c; twice[$2] += c } } }
	END {
		printf "== tools: %.1f CPU-s (compile %.1f, asm %.1f, link %.1f); compiled again: %.1f\n", total, bytool["compile"], bytool["asm"], bytool["link"], again
		for (m in bymod) printf "%8.1f  %s\n", bymod[m], m | "sort -rn | head -30"
		close("sort -rn | head -30")
		for (p in twice) printf "%8.1f  again: %s\n", twice[p], p | "sort -rn | head -20"
	}' "$COLD_BUILD_LOG"
