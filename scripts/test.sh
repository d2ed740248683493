#!/usr/bin/env bash
# `make test`: every module's tests (`go test ./...` stops at module boundaries, so each module runs on its own).
#
# The black-box tests of the binary are three packages by kind (test/e2e, test/chaos, test/fleet), each its own
# test binary. First the core and every plugin are built once into a folder every test process uses
# (internal/testplugins). test/fleet (TestFleetChaos alone is ~10 min) spends most of its time waiting: for etcd
# leases to lapse, for elections, for a moved pipeline's first apply. It runs from the start as its own `go test`
# process beside everything else; it has its own hosts (network namespaces with unique names), Postgres and S3
# server, so it shares nothing with the rest. In the root module test/e2e and test/chaos are named first, so
# `go test` (-p 2: two test binaries at a time) starts them first and they overlap each other and the engine's
# packages instead of queueing at the end. The other modules follow, two at a time. The chaos tests run at their
# small default counts (`make chaos` raises them).
#
# Every module runs even after a failure, so one CI run shows every failing module; the exit status is 1 if any
# failed. Usage: scripts/test.sh MODULE... (the environment passes VERSITYGW, SEAWEEDFS and GOFLAGS through).
set -uo pipefail
GO=${GO:-go}
background=./test/fleet
first=(./test/e2e ./test/chaos)
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

# The core and every plugin named in MODULES, built once for every test process (internal/testplugins reads
# SKIPPR_TEST_BINARIES): test/e2e, test/chaos, test/fleet and the engine's packages each linked the same ten
# binaries themselves, minutes of CPU on CI's two cores. Two links at a time: a link is mostly one core.
bins="$logs/bin"
mkdir -p "$bins"
echo "== build the core and the plugins once for the tests"
# tags_of is a module's build tags for its binary and its tests: the duckdb plugin's arrow query format needs
# duckdb-go's Arrow results (the Makefile's PLUGIN_TAGS, internal/testplugins).
tags_of() {
	case $1 in plugins/duckdb) echo duckdb_arrow ;; esac
}
build() {
	if [ "$1" = core ]; then
		CGO_ENABLED=0 "$GO" build -tags "${SKIPPR_CORE_TAGS:-}" -o "$bins/skippr" ./cmd/skippr &&
			CGO_ENABLED=0 "$GO" build -tags "${SKIPPR_CORE_TAGS:-}" -o "$bins/skippr-serve" ./cmd/skippr-serve
	else
		(cd "plugins/$1" && "$GO" build -tags "$(tags_of "plugins/$1")" -o "$bins/skippr-plugin-$1" .)
	fi
}
export -f build tags_of
export GO bins logs
{
	echo "core"
	for m in "$@"; do case $m in plugins/*) echo "${m#plugins/}" ;; esac; done
} | xargs -P 2 -I{} bash -c 'build "$1"' _ {} || { echo "test: FAILED: building the binaries the tests run"; exit 1; }
export SKIPPR_TEST_BINARIES=$bins

"$GO" test -count=1 -timeout 40m "$background" >"$logs/fleet" 2>&1 &
fleet=$!
failed=()
# One module's tests into its own log; the log is printed whole when the module ends, so two modules running
# side by side do not interleave their output.
module() {
	local m=$1 log="$logs/module.${1//\//_}"
	if [ "$m" = deploy/promcheck ]; then
		# Prometheus' PromQL parser over the dashboard and alert rules: a module outside go.work.
		(cd "$m" && GOWORK=off "$GO" test -count=1 ./...)
	else
		(cd "$m" && "$GO" test -count=1 -timeout 40m -tags "$(tags_of "$m")" ./...)
	fi >"$log" 2>&1
	local rc=$?
	{
		flock 9
		echo "== go test $m"
		cat "$log"
	} 9>"$logs/print.lock"
	return $rc
}

# The root module first and alone beside test/fleet: test/e2e and test/chaos keep both cores busy for most of
# a run. Then the other modules two at a time: their tests wait on servers more than they compute (a third of
# CI's CPU sat idle when they ran one by one). deploy/promcheck (with an empty module cache it downloads and
# compiles Prometheus for minutes) goes with them rather than into the busy root phase.
rest=(deploy/promcheck)
for m in "$@"; do
	if [ "$m" = . ]; then
		# Its packages with test/fleet left out (it runs beside everything) and the slow ones first; printed as
		# they end, since nothing runs beside it to interleave with.
		echo "== go test ."
		if pkgs=$("$GO" list ./... | grep -v -e '/test/fleet$' -e '/test/e2e$' -e '/test/chaos$'); then
			# shellcheck disable=SC2086
			"$GO" test -count=1 -timeout 40m "${first[@]}" $pkgs || failed+=(.)
		else
			failed+=(.)
		fi
	else
		rest+=("$m")
	fi
done
# A module that fails is named in $logs/failed (xargs runs each in a shell of its own).
export -f module tags_of
printf '%s\n' "${rest[@]}" | xargs -P 2 -I{} bash -c 'module "$1" || echo "$1" >>"$logs/failed"' _ {}
if [ -s "$logs/failed" ]; then
	while read -r m; do failed+=("$m"); done <"$logs/failed"
fi

echo "== go test $background (ran beside the modules above)"
wait "$fleet" || failed+=("$background")
cat "$logs/fleet"

if [ ${#failed[@]} -gt 0 ]; then
	echo "test: FAILED: ${failed[*]}"
	exit 1
fi
echo "test: every module passed"
