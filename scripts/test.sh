#!/usr/bin/env bash
# `make test`: every module's tests (`go test ./...` stops at module boundaries, so each module runs on its own).
#
# The black-box tests of the binary are three packages by kind (test/e2e, test/chaos, test/fleet), each its own
# test binary. test/fleet (TestFleetChaos alone is ~13 min for its 20 faults) spends most of its time waiting:
# for etcd leases to lapse, for elections, for a moved pipeline's first apply. It runs from the start as its own
# `go test` process beside everything else; it has its own hosts (network namespaces with unique names), Postgres
# and S3 server, so it shares nothing with the rest. In the root module test/e2e and test/chaos are named first,
# so `go test` (-p 2: two test binaries at a time) starts them first and they overlap each other and the engine's
# packages instead of queueing at the end. The chaos tests run at their small default counts (`make chaos`
# raises them).
#
# Every module runs even after a failure, so one CI run shows every failing module; the exit status is 1 if any
# failed. Usage: scripts/test.sh MODULE... (the environment passes VERSITYGW, SEAWEEDFS and GOFLAGS through).
set -uo pipefail
GO=${GO:-go}
background=./test/fleet
first=(./test/e2e ./test/chaos)
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

"$GO" test -count=1 -timeout 40m "$background" >"$logs/fleet" 2>&1 &
fleet=$!
# deploy/promcheck (Prometheus' PromQL parser over the dashboard and alert rules) is a module outside go.work;
# with an empty module cache it downloads and compiles Prometheus for ~5 minutes, mostly network, so it runs
# beside the rest too instead of before it.
(cd deploy/promcheck && GOWORK=off "$GO" test -count=1 ./...) >"$logs/deploy" 2>&1 &
deploy=$!

failed=()
for m in "$@"; do
	echo "== go test $m"
	if [ "$m" = . ]; then
		# The root module's packages with test/fleet left out (it runs above) and the slow ones first.
		pkgs=$("$GO" list ./... | grep -v -e '/test/fleet$' -e '/test/e2e$' -e '/test/chaos$') || { failed+=("$m"); continue; }
		# shellcheck disable=SC2086
		"$GO" test -count=1 -timeout 40m "${first[@]}" $pkgs || failed+=("$m")
	else
		(cd "$m" && "$GO" test -count=1 -timeout 40m ./...) || failed+=("$m")
	fi
done

echo "== go test deploy/promcheck (ran beside the modules above)"
wait "$deploy" || failed+=(deploy/promcheck)
cat "$logs/deploy"

echo "== go test $background (ran beside the modules above)"
wait "$fleet" || failed+=("$background")
cat "$logs/fleet"

if [ ${#failed[@]} -gt 0 ]; then
	echo "test: FAILED: ${failed[*]}"
	exit 1
fi
echo "test: every module passed"
