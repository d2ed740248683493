#!/usr/bin/env bash
# `make test`: every module's tests (`go test ./...` stops at module boundaries, so each module runs on its own).
#
# TestFleetChaos (cmd/skippr, ~13 min for its 20 faults) spends most of its time waiting: for etcd leases to
# lapse, for elections, for a moved pipeline's first apply. Run after the root module's other tests it was the
# longest stretch of CI; run beside them, as its own `go test` process, it costs little wall time. It has its own
# hosts (network namespaces with unique names), Postgres and S3 server, so the two processes share nothing.
#
# Every module runs even after a failure, so one CI run shows every failing module; the exit status is 1 if any
# failed. Usage: scripts/test.sh MODULE... (the environment passes VERSITYGW, SEAWEEDFS and GOFLAGS through).
set -uo pipefail
GO=${GO:-go}
chaos_test='^TestFleetChaos$'
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

"$GO" test -count=1 -timeout 40m -run "$chaos_test" ./cmd/skippr >"$logs/fleetchaos" 2>&1 &
chaos=$!

failed=()
for m in "$@"; do
	echo "== go test $m"
	skip=()
	[ "$m" = . ] && skip=(-skip "$chaos_test")
	(cd "$m" && "$GO" test -count=1 -timeout 40m "${skip[@]}" ./...) || failed+=("$m")
done

echo "== go test -run '$chaos_test' ./cmd/skippr (ran beside the modules above)"
wait "$chaos" || failed+=("./cmd/skippr -run $chaos_test")
cat "$logs/fleetchaos"

if [ ${#failed[@]} -gt 0 ]; then
	echo "test: FAILED: ${failed[*]}"
	exit 1
fi
echo "test: every module passed"
