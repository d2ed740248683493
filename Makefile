# skippr — see README.md. Every target works from a clean clone; `make tools` installs what the tests need
# besides Go (an S3-compatible server, and SeaweedFS for the Iceberg REST catalog) into .cache/bin.
GO        ?= go
BIN       := $(CURDIR)/bin
TOOLS     := $(CURDIR)/.cache/bin
VERSION   ?= 0.1.0-dev
PLUGINS   := datagen testdest http postgres iceberg duckdb mysql bigquery snowflake
MODULES   := . plugin-sdk bench testkit $(addprefix plugins/,$(PLUGINS))
REGISTRY  := $(CURDIR)/.dev/registry
DEVKEY    := $(CURDIR)/.dev/keys
VERSITYGW := $(TOOLS)/versitygw
# SeaweedFS's `weed mini`: an S3 gateway with an embedded Iceberg REST catalog, for the iceberg plugin's REST
# catalog tests (testkit/seaweedtest). The proxy serves only this pseudo-version of the module.
SEAWEEDFS := $(TOOLS)/weed
SEAWEEDFS_MODULE := github.com/seaweedfs/seaweedfs@v0.0.0-20261109003541-7506e5f91cd6
export PATH := $(TOOLS):$(PATH)

# The core and every plugin but duckdb (DuckDB's C++ library) build without cgo: static binaries that run on any
# Linux, and the core's only cgo was `net` and `os/user`, whose pure-Go versions serve it as well. The tags drop
# code the core never runs: arrow's goccy/go-json encoder (arrow_json_stdlib), and the two users of
# text/template's reflect.Value.MethodByName — urfave/cli's help templates (urfave_cli_no_template: help is
# printed directly) and grpc's golang.org/x/net/trace pages (grpcnotrace). While either is linked, the linker
# keeps every exported method of every reachable type: 33.5 MB instead of 23.4 (BENCHMARKS.md, "Binary size").
# `make release`, `make check-size` and the tests' own builds of the core use these tags (internal/testplugins
# reads SKIPPR_CORE_TAGS); `make build` all but arrow_json_stdlib (BUILD_TAGS below).
CGO_PLUGINS := duckdb
CORE_TAGS   := arrow_json_stdlib urfave_cli_no_template grpcnotrace
# Issue #20: the release core (static, stripped) stays under 25 MB (10^6 bytes); `make check-size` and
# `make release` fail above it.
CORE_MAX_BYTES := 25000000
# The plugins drop grpc's trace pages too (−0.4 MB each). They stay larger than they could be: go-plugin's
# plugin side registers a net/rpc server, whose reflect.Type.Method keeps every exported method linked.
# duckdb_arrow builds duckdb-go's Arrow results, the duckdb plugin's arrow query format that `skippr serve`
# streams (no other plugin imports duckdb-go); scripts/test.sh and internal/testplugins set it for duckdb too.
# Not arrow_json_stdlib: the iceberg plugin's geoarrow-go implements arrow's builders with goccy/go-json's
# decoder and does not compile with the tag.
PLUGIN_TAGS := grpcnotrace duckdb_arrow
export SKIPPR_CORE_TAGS := $(CORE_TAGS)
# `make build` (what the quickstart runs) compiles every package once, for all its binaries in one `go build`, so
# one binary's link or largest package overlaps the others' compiling on a 2-core machine. One configuration for
# all: the plugins' tags and urfave_cli_no_template (which changes only the core), so this core keeps arrow's
# default JSON encoder, goccy/go-json, as the plugins do (with arrow_json_stdlib, arrow-go and everything above
# it would compile twice, ≈ 23 CPU-s); and cgo allowed, which the duckdb plugin needs, with netgo and osusergo.
# A cgo build compiles package `net` with its cgo resolver, and so every package above it (gRPC, go-plugin, the
# SDK, net/http, the AWS SDK, Parquet) a second time; with netgo and osusergo, `net` and `os/user` are the
# pure-Go code a CGO_ENABLED=0 build runs, and the core and every plugin but duckdb contain no cgo package and
# link statically, which `make build` checks. `make release`, `make check-size` and the tests' builds keep
# CGO_ENABLED=0 and each binary's own tags.
BUILD_TAGS := $(PLUGIN_TAGS) urfave_cli_no_template netgo osusergo
# Plugins with a dependency that has cgo code of its own when cgo is allowed (gosnowflake): `make build` builds
# them in a second `go build` with CGO_ENABLED=0, as the release does, so they stay static and run the code the
# release runs.
NOCGO_PLUGINS := snowflake
# No debug information, as the release (-s -w): the compiler's DWARF was ≈ 11% of a cold build's CPU
# (BENCHMARKS.md, "Cold build"). Stack traces and profiles keep function names and lines (they come from the
# pclntab, which stays); a debugger wants `go build` without these.
BUILD_FLAGS := -gcflags "all=-dwarf=false" -ldflags "all=-s -w"

.PHONY: build check-size check-deploy sdk-release test proto registry release bench lint chaos tools quickstart quickstart-mysql quickstart-intro clean live-snowflake live-bigquery

# The `go list` first only fetches the modules the build needs, many at a time: the go command fetches with as
# many goroutines as GOMAXPROCS, which is the core count `go build` keeps for compiling, and the fetches wait on
# the network, not the CPU (a cold fetch of the quickstart's modules: 43 s at 2, 16 s at 16; BENCHMARKS.md,
# "Cold build"). With the modules already here it takes about a second.
# The version goes into the core's and skippr-serve's main only (-ldflags with a package pattern): each plugin's
# version is its own source's.
build:
	@rm -rf $(BIN)/.build && mkdir -p $(BIN)/.build
	@CGO_ENABLED=1 GOMAXPROCS=16 $(GO) list -e -deps -tags "$(BUILD_TAGS)" ./cmd/skippr ./cmd/skippr-serve $(addprefix ./plugins/,$(PLUGINS)) >/dev/null
	CGO_ENABLED=1 $(GO) build -tags "$(BUILD_TAGS)" $(BUILD_FLAGS) -ldflags "./cmd/...=-s -w -X main.version=$(VERSION)" -o $(BIN)/.build/ ./cmd/skippr ./cmd/skippr-serve $(addprefix ./plugins/,$(filter-out $(NOCGO_PLUGINS),$(PLUGINS)))
	$(if $(filter $(NOCGO_PLUGINS),$(PLUGINS)),CGO_ENABLED=0 $(GO) build -tags "$(PLUGIN_TAGS)" $(BUILD_FLAGS) -o $(BIN)/.build/ $(addprefix ./plugins/,$(filter $(NOCGO_PLUGINS),$(PLUGINS))))
	@mv -f $(BIN)/.build/skippr $(BIN)/.build/skippr-serve $(BIN)/ && for p in $(PLUGINS); do mv -f $(BIN)/.build/$$p $(BIN)/skippr-plugin-$$p || exit 1; done; rm -rf $(BIN)/.build
	@if [ "$$(uname)" = Linux ] && command -v readelf >/dev/null; then \
		for b in skippr skippr-serve $(addprefix skippr-plugin-,$(filter-out $(CGO_PLUGINS),$(PLUGINS))); do \
			if readelf -l $(BIN)/$$b | grep -q INTERP; then echo "build: $(BIN)/$$b is dynamically linked: a dependency brought cgo into it; see go list -deps -tags \"$(BUILD_TAGS)\" -f '{{if .CgoFiles}}{{.ImportPath}}{{end}}'" >&2; exit 1; fi; \
		done; fi

# The core built as `make release` builds it (static, stripped), for this platform, and its size checked against
# CORE_MAX_BYTES. It shares compiled packages with `make build` and the tests' build of the core (same tags, no
# cgo), so after either it only links. (No -trimpath, unlike the release: that would compile everything again,
# and the paths it keeps make this binary slightly larger than the released one, never smaller.)
check-size:
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -tags "$(CORE_TAGS)" -ldflags "-s -w" -o $(BIN)/skippr-size ./cmd/skippr
	@size=$$(stat -c %s $(BIN)/skippr-size); rm -f $(BIN)/skippr-size; \
	if [ $$size -gt $(CORE_MAX_BYTES) ]; then \
		echo "check-size: the static stripped core is $$size bytes, over the limit of $(CORE_MAX_BYTES) (issue #20);" \
			"see what grew: go tool nm -size -sort size, or go version -m, and BENCHMARKS.md \"Binary size\"" >&2; exit 1; \
	else echo "check-size: the static stripped core is $$size bytes (limit $(CORE_MAX_BYTES))"; fi

# The Snowflake destination's tests against a real account (plugins/snowflake/README.md, "Tests"), with the
# credentials in SKIPPR_SNOWFLAKE_*: each test uses its own pipeline id and table names and drops them at its end.
# Then the type matrix (test/e2e) and the SIGKILL run (test/chaos) through skippr sync into the account, each in
# a schema of its own, dropped at its end (test/harness/warehouse.go).
# Without SKIPPR_SNOWFLAKE_ACCOUNT it builds the tests, runs TestLiveAccount, which skips saying how to run, and
# succeeds.
live-snowflake:
	@if [ -n "$$SKIPPR_SNOWFLAKE_ACCOUNT" ]; then \
		for v in USER WAREHOUSE DATABASE; do eval "x=\$$SKIPPR_SNOWFLAKE_$$v"; [ -n "$$x" ] || { echo "live-snowflake: set SKIPPR_SNOWFLAKE_$$v" >&2; exit 1; }; done; \
		[ -n "$$SKIPPR_SNOWFLAKE_PASSWORD$$SKIPPR_SNOWFLAKE_PRIVATE_KEY" ] || { echo "live-snowflake: set SKIPPR_SNOWFLAKE_PASSWORD or SKIPPR_SNOWFLAKE_PRIVATE_KEY" >&2; exit 1; }; \
		(cd plugins/snowflake && $(GO) test -count=1 -v -timeout 30m ./dest/) && \
		VERSITYGW=$(VERSITYGW) SEAWEEDFS=$(SEAWEEDFS) $(GO) test -count=1 -v -timeout 60m -run '^TestTypeMatrixIntoSnowflake$$' ./test/e2e/ && \
		VERSITYGW=$(VERSITYGW) SEAWEEDFS=$(SEAWEEDFS) $(GO) test -count=1 -v -timeout 60m -run '^TestPostgresToSnowflakeSurvivesSIGKILL$$' ./test/chaos/; \
	else \
		cd plugins/snowflake && $(GO) test -count=1 -v -run '^TestLiveAccount$$' ./dest/; \
	fi

# Each module is tested on its own (`go test ./...` stops at module boundaries); see scripts/test.sh.
test: tools
	@VERSITYGW=$(VERSITYGW) SEAWEEDFS=$(SEAWEEDFS) GO=$(GO) bash scripts/test.sh $(MODULES)

# The PromQL of deploy/ (Grafana dashboard, alert rules) parsed by Prometheus' own parser, each metric checked
# against docs/metrics.md. deploy/promcheck is a module outside go.work (see its doc.go), hence GOWORK=off.
# `make test` runs the same check beside the other modules (scripts/test.sh).
check-deploy:
	cd deploy/promcheck && GOWORK=off $(GO) test -count=1 ./...

# The plugin SDK as a versioned source release (dist/skippr-plugin-sdk-vX.Y.Z.tar.gz and .zip, and a GOPROXY
# folder dist/goproxy), checked by building plugin-sdk/README.md's worked example outside the workspace against
# each form. See scripts/sdk-release.sh.
sdk-release:
	GO=$(GO) bash scripts/sdk-release.sh

# Regenerates the checked-in protobuf code (needs protoc; `apt-get install protobuf-compiler`).
proto:
	GOBIN=$(TOOLS) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
	GOBIN=$(TOOLS) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.5.1
	cd plugin-sdk && protoc -I proto --go_out=. --go_opt=module=github.com/skippr-dev/skippr/plugin-sdk \
		--go-grpc_out=. --go-grpc_opt=module=github.com/skippr-dev/skippr/plugin-sdk proto/skippr/plugin/v2/plugin.proto

# A local registry signed with a development key, so the quickstart and the tests install plugins the way
# users do. The key stays in .dev (not in git). Published versions are immutable, so the development registry
# is made anew from this tree's binaries each time.
registry: build
	@rm -rf $(REGISTRY) && mkdir -p $(REGISTRY)
	@test -f $(DEVKEY)/skippr-ed25519.pub || $(BIN)/skippr registry keygen --out $(DEVKEY)
	@for p in $(PLUGINS); do \
		v=$$($(BIN)/skippr-plugin-$$p --skippr-plugin-info | sed -E 's/.*"version":"([^"]+)".*/\1/'); \
		$(BIN)/skippr registry add $(REGISTRY) $(BIN)/skippr-plugin-$$p --name $$p --version $$v --os $$($(GO) env GOOS) --arch $$($(GO) env GOARCH) --quiet || exit 1; \
	done
	$(BIN)/skippr registry sign $(REGISTRY) --key $(DEVKEY)/skippr-ed25519.key
	@echo "registry: file://$(REGISTRY) (public key $(DEVKEY)/skippr-ed25519.pub)"

# Release builds (stripped, static where there is no cgo) of the core and the plugins for linux/darwin ×
# amd64/arm64 into dist/, published into the signed registry dist/registry, then checked: a lock written from it
# records every platform's sha256. See scripts/release.sh (RELEASE_PLATFORMS, RELEASE_KEY, DIST).
release:
	GO=$(GO) VERSION=$(VERSION) PLUGINS="$(PLUGINS)" CGO_PLUGINS="$(CGO_PLUGINS)" CORE_TAGS="$(CORE_TAGS)" PLUGIN_TAGS="$(PLUGIN_TAGS)" CORE_MAX_BYTES=$(CORE_MAX_BYTES) bash scripts/release.sh

bench: build tools
	$(GO) run ./bench -bin $(BIN)
	cd engine/wal && VERSITYGW=$(VERSITYGW) $(GO) test -run '^$$' -bench 'LocalAppend|CommitLatency' -benchtime 20x .
	cd engine/wal && VERSITYGW=$(VERSITYGW) $(GO) test -run '^$$' -bench CommitUnderReclaim -benchtime 1000x .
	cd plugins/iceberg && for v in snapshot/pqarrow snapshot/iceberg changes/pqarrow changes/iceberg; do SKIPPR_ICEBERG_BENCH_ROWS=10000000 $(GO) test -run '^$$' -bench "BenchmarkLake/$$v" -benchtime 1x -timeout 60m ./lake/ || exit 1; done

# Every kill and fault test at high counts: all of test/chaos (every *SurvivesSIGKILL test, TestChaos,
# TestChaosFaults) and test/fleet's TestFleetChaos, the two packages side by side.
chaos: build tools
	VERSITYGW=$(VERSITYGW) SEAWEEDFS=$(SEAWEEDFS) SKIPPR_CHAOS_KILLS=100 SKIPPR_CHAOS_FAULTS=100 SKIPPR_FLEET_CHAOS_FAULTS=40 $(GO) test -count=1 -timeout 90m -v ./test/chaos ./test/fleet

# The BigQuery plugin against a real project (plugins/bigquery/README.md, "Tests"): set SKIPPR_BIGQUERY_PROJECT
# and SKIPPR_BIGQUERY_DATASET, and SKIPPR_BIGQUERY_CREDENTIALS_JSON (or application-default credentials). Each
# run uses its own pipeline ids and table prefix and drops what it made; then the type matrix (test/e2e) and the
# SIGKILL run (test/chaos) through skippr sync, each in a dataset of its own (in SKIPPR_BIGQUERY_LOCATION,
# default US), deleted at its end. Without the variables it says what to set and fails.
live-bigquery:
	@test -n "$$SKIPPR_BIGQUERY_PROJECT" -a -n "$$SKIPPR_BIGQUERY_DATASET" || { echo "live-bigquery: set SKIPPR_BIGQUERY_PROJECT and SKIPPR_BIGQUERY_DATASET (and SKIPPR_BIGQUERY_CREDENTIALS_JSON or application-default credentials)"; exit 2; }
	cd plugins/bigquery && $(GO) test -count=1 -timeout 30m -run 'TestLive' -v ./dest/
	VERSITYGW=$(VERSITYGW) SEAWEEDFS=$(SEAWEEDFS) $(GO) test -count=1 -v -timeout 60m -run '^TestTypeMatrixIntoBigQuery$$' ./test/e2e/
	VERSITYGW=$(VERSITYGW) SEAWEEDFS=$(SEAWEEDFS) $(GO) test -count=1 -v -timeout 60m -run '^TestPostgresToBigQuerySurvivesSIGKILL$$' ./test/chaos/

# The engine's failpoints build is vetted too (engine/failpoint: files that exist only under that tag).
lint:
	@set -e; for m in $(MODULES); do (cd $$m && $(GO) vet ./...); done
	cd plugins/duckdb && $(GO) vet -tags duckdb_arrow ./...
	$(GO) vet -tags "$(CORE_TAGS) failpoints" ./engine/...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

tools: $(VERSITYGW) $(SEAWEEDFS)

$(VERSITYGW):
	@mkdir -p $(TOOLS)
	GOBIN=$(TOOLS) $(GO) install github.com/versity/versitygw/cmd/versitygw@v1.8.0

# `go install …/weed@VERSION` refuses the module (its go.mod has a replace directive), so weed is built in the
# module's own directory in the module cache, with its own go.mod and go.sum; the cache is read-only, which
# `go build -o` does not mind.
$(SEAWEEDFS):
	@mkdir -p $(TOOLS)
	GOWORK=off GOFLAGS= $(GO) mod download $(SEAWEEDFS_MODULE)
	cd "$$($(GO) env GOMODCACHE)/$(SEAWEEDFS_MODULE)" && GOWORK=off GOFLAGS= $(GO) build -ldflags "-s -w" -o $(SEAWEEDFS) ./weed

# The cold first run is mostly Go downloading modules and compiling: say so before it goes quiet. Each
# quickstart builds (and publishes into the development registry) only the plugins it runs: its source, the
# iceberg destination and duckdb, the query engine `skippr query` installs on first use (issue #31: the other
# six plugins were most of a cold run's compile time and none of them runs).
QUICKSTART_PLUGINS       := postgres iceberg duckdb
QUICKSTART_MYSQL_PLUGINS := mysql iceberg duckdb
quickstart: quickstart-intro
	$(MAKE) --no-print-directory registry PLUGINS="$(QUICKSTART_PLUGINS)"
	bash scripts/quickstart.sh

# The same with a throwaway MariaDB as the source (snapshot, binary log, a schema change).
quickstart-mysql: quickstart-intro
	$(MAKE) --no-print-directory registry PLUGINS="$(QUICKSTART_MYSQL_PLUGINS)"
	bash scripts/quickstart-mysql.sh

quickstart-intro:
	@if [ ! -x $(BIN)/skippr ]; then \
		echo "== quickstart: building skippr and its plugins first. With empty Go caches Go downloads the modules and"; \
		echo "   compiles everything once: about 4.5 minutes on 2 idle cores (¼ of a minute of downloads, 4 of compiling),"; \
		echo "   longer on a busy machine; the iceberg and duckdb plugins are most of it (BENCHMARKS.md, \"Cold build\")."; \
		echo "   Later runs reuse the caches and take well under a minute."; \
	else echo "== quickstart: rebuilding skippr and its plugins (cached: seconds)"; fi

clean:
	rm -rf $(BIN) .dev dist
