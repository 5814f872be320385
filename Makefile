# Danmaku: build, check and test. `make help` lists the targets.
#
# `make test` is what CI runs (.ci/run): it installs missing servers, checks
# formatting, vet and staticcheck (make lint), runs every test with the race
# detector — integration and end-to-end tests against real Redis, S3
# (versitygw) and Varnish included, and required — then runs every
# benchmark once.
#
# Two modules: the server (danmaku, the root) and the SDK (danmaku/sdk, in
# sdk/, which apps require). go.work puts both in one build, and `./...`
# stops at a nested module, so every target names both: $(PKGS).

PKGS := ./... ./sdk/...
# SERVER_DEPS are what an app requiring danmaku/sdk must never get.
SERVER_DEPS := gin-gonic|aws-sdk-go-v2|go-redis|lesismal

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

GO ?= go

# `go install` puts versitygw in GOBIN or the first GOPATH's bin, and Debian
# puts varnishd in /usr/sbin; neither is always on PATH. Adding them here lets
# a freshly installed binary be found by the tests in the same run.
GOBIN_DIR := $(shell $(GO) env GOBIN)
ifeq ($(GOBIN_DIR),)
GOBIN_DIR := $(firstword $(subst :, ,$(shell $(GO) env GOPATH)))/bin
endif
export PATH := $(GOBIN_DIR):$(PATH):/usr/sbin:/usr/local/sbin

.PHONY: help deps fmt-check vet lint test fuzz test-hog reliability soak rehearse bench bench-latency bench-web bench-rooms bench-ingest bench-limits bench-roundtrips bench-takedown local-up local-down

help: ## list the targets
	@echo "Targets:"
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  %-11s %s\n", $$1, $$2}' $(MAKEFILE_LIST)
	@echo "Local stack ports: Redis 6390, S3 7070, CDN 7080, Prometheus 9090 (see docs/operations-local.md)."

deps: ## install what is missing: redis-server, varnish, gcc, a JDK, prometheus (promtool), ffmpeg, chromium, node (apt-get), versitygw (go install), sdk/web's npm packages
	@bash infra/local/deps.sh
	@bash sdk/web/deps.sh

fmt-check: ## fail if gofmt would change any Go file
	@out="$$(find . -name '*.go' -not -path './.git/*' -not -path './.local/*' -print0 | xargs -0 -r gofmt -l)"; \
	if [[ -n "$$out" ]]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi; \
	echo "fmt-check: ok"

vet: ## go vet both modules; the SDK also alone, as an app builds it (its go.mod, no workspace), with no server dependency in its module graph
	$(GO) vet $(PKGS)
	cd sdk && GOWORK=off $(GO) vet ./...
	@if deps="$$(cd sdk && GOWORK=off $(GO) mod graph | grep -E '$(SERVER_DEPS)')"; then \
		echo "the SDK module's graph names server dependencies:"; echo "$$deps"; exit 1; fi; \
	echo "sdk module graph: no server dependency"

lint: ## staticcheck over both modules at the version pinned in go.mod's tool block: any finding fails (a narrow //lint:ignore CHECK reason where one is wrong)
	$(GO) tool staticcheck $(PKGS)

test: deps fmt-check vet lint ## deps + fmt-check + vet + lint + race tests against real servers + every benchmark once
	DANMAKU_REQUIRE_SERVERS=1 $(GO) test -race -count=1 -timeout 20m $(PKGS)
	$(GO) test -race -count=1 -tags faultclock ./internal/clock # the fault table's test-only clock offset
	DANMAKU_REQUIRE_SERVERS=1 $(GO) test -run '^$$' -bench . -benchtime=1x -timeout 10m $(PKGS)

# RUNS is how many whole race suites `make test-hog` wants in a row;
# HOG_P how many test binaries run at once (go test -p): 4, more than go
# test's default of one a core, so that each test gets less of the CPU
# beside the hog, not more.
RUNS ?= 5
HOG_P ?= 4

test-hog: deps ## the suite under a CPU hog: RUNS (5) consecutive `go test -race -p 4` of both modules beside stress-ng --cpu 4, stopping at the first failure; ~10 min a run on 2 cores (docs/reliability.md)
	@stress-ng --cpu 4 --timeout 12h >/dev/null 2>&1 & hog=$$!; trap 'kill $$hog 2>/dev/null' EXIT; \
	for i in $$(seq $(RUNS)); do \
		echo "test-hog: run $$i of $(RUNS), $$(date -u +%T) UTC, load $$(cut -d' ' -f1-3 /proc/loadavg)"; \
		start=$$(date +%s); \
		DANMAKU_REQUIRE_SERVERS=1 $(GO) test -race -count=1 -p $(HOG_P) -timeout 60m $(PKGS) || { echo "test-hog: run $$i failed: $$((i-1)) consecutive passes"; exit 1; }; \
		echo "test-hog: run $$i passed in $$(( $$(date +%s) - start )) s"; \
	done; echo "test-hog: $(RUNS) consecutive passes"

# The show's load for `make reliability` and `make soak`; scale it down on a
# machine that cannot hold it (docs/reliability.md says what was run).
VIEWERS ?= 1000
SENDERS ?= 200
GIFTS ?= 20
# EVENT is the show `make rehearse` plans and runs (an event file).
EVENT ?= infra/rehearse/small-show.event.json
# ROWS picks fault rows by regexp; SOAK is the soak's length (30m for the long one).
ROWS ?= .
SOAK ?= 10m
FAULTS_ENV = DANMAKU_REQUIRE_SERVERS=1 DANMAKU_FAULTS_WRITE=1 DANMAKU_FAULTS_VIEWERS=$(VIEWERS) DANMAKU_FAULTS_SENDERS=$(SENDERS) DANMAKU_FAULTS_GIFTS=$(GIFTS)

reliability: deps ## the fault table under load: every role its own process (two of each), loadgen at VIEWERS/SENDERS/GIFTS, one fault per row (ROWS=regexp), ~1 min a row; writes the table into docs/reliability.md
	$(FAULTS_ENV) DANMAKU_RELIABILITY=1 DANMAKU_FAULTS_ROWS='$(ROWS)' $(GO) test -count=1 -run '^TestReliability$$' -v -timeout 60m ./internal/faults

soak: deps ## the same load for SOAK (default 10m; SOAK=30m), every role, Redis and S3 sampled each 10 s; a slope and a verdict per series, written into docs/reliability.md
	$(FAULTS_ENV) DANMAKU_SOAK=$(SOAK) $(GO) test -count=1 -run '^TestSoak$$' -v -timeout 90m ./internal/faults

rehearse: deps ## plan vs reality: plans the small show (infra/rehearse) on infra/profiles/this-machine.json, starts the real stack with the plan's counts, loadgen -procs 2 at the plan's peak and 1.5x for 60 s each; HTML reports and summary.txt in .local/rehearse
	DANMAKU_REQUIRE_SERVERS=1 DANMAKU_REHEARSE=1 DANMAKU_REHEARSE_EVENT=$(EVENT) DANMAKU_REHEARSE_OUT=$(CURDIR)/.local/rehearse $(GO) test -count=1 -run '^TestRehearse$$' -v -timeout 30m ./internal/faults

bench: deps ## benchmarks, 5 runs each, for docs/benchmarks.md (pipe to a file, compare with benchstat)
	DANMAKU_REQUIRE_SERVERS=1 $(GO) test -run '^$$' -bench . -benchmem -count=5 -timeout 60m $(PKGS)

bench-latency: deps ## barrage latency through Varnish, 1,000 pollers, 60 s, 1000 and 500 ms segments, 3 runs each (docs/benchmarks.md)
	for ms in 1000 500; do for run in 1 2 3; do \
		DANMAKU_REQUIRE_SERVERS=1 DANMAKU_LATENCY_POLLERS=1000 DANMAKU_LATENCY_SECONDS=60 DANMAKU_LATENCY_RATE=10 \
		DANMAKU_LATENCY_SEGMENT_MS=$$ms $(GO) test -run '^$$' -bench PollLatency -benchtime 1x -timeout 10m ./internal/stack; \
	done; done

bench-rooms: deps ## what idle live rooms cost a leader and its standby (Redis calls, CPU, heap) at 10, 100 and 1,000 rooms (docs/benchmarks.md)
	DANMAKU_REQUIRE_SERVERS=1 DANMAKU_ROOMS=10,100,1000 $(GO) test -run '^$$' -bench IdleRooms -benchtime 1x -count 3 -timeout 20m ./slicer

bench-ingest: deps ## upload path: loopback throughput vs a bare gin handler (5 runs); three nodes on Redis: round trips, Redis outage, 38,000/s pulse (3 runs each) (docs/benchmarks.md)
	for run in 1 2 3 4 5; do \
		DANMAKU_REQUIRE_SERVERS=1 $(GO) test -run '^$$' -bench IngestHTTP -benchtime 100000x -count 1 -timeout 30m ./ingest | grep req/s; \
	done
	for run in 1 2 3; do \
		DANMAKU_REQUIRE_SERVERS=1 DANMAKU_LOAD=1 $(GO) test -run 'TestLoad' -count 1 -v -timeout 20m ./ingest | grep -E '^(=== RUN|--- |    load_test)'; \
	done

fuzz: ## every fuzz target for FUZZTIME each (default 30s; FUZZ=regexp picks targets by name); a crasher is kept in the package's testdata/fuzz and fails the run (docs/reliability.md)
	@fuzztime="$${FUZZTIME:-30s}"; pick="$${FUZZ:-.}"; failed=0; \
	while IFS= read -r file; do \
		dir="$$(dirname "$$file")"; \
		for name in $$(grep -o '^func Fuzz[A-Za-z0-9_]*' "$$file" | cut -d' ' -f2); do \
			[[ "$$name" =~ $$pick ]] || continue; \
			echo "== $$dir $$name ($$fuzztime)"; \
			$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime "$$fuzztime" "$$dir" || failed=1; \
		done; \
	done < <(grep -rl --include='*_test.go' '^func Fuzz' . | sort); \
	exit $$failed

bench-takedown: deps ## takedown latency through Varnish: 100 takedowns under 1,200 comments/s, to a viewer's notice and to the CDN's takedowns.json (3 runs; docs/benchmarks.md)
	for run in 1 2 3; do \
		DANMAKU_REQUIRE_SERVERS=1 DANMAKU_TAKEDOWN_RATE=1200 DANMAKU_TAKEDOWNS=100 \
		$(GO) test -run '^$$' -bench TakedownLatency -benchtime 1x -timeout 10m ./internal/stack; \
	done

bench-roundtrips: deps ## whole stack (gslb, ingest, edge processes, one Redis): Redis round trips per 1,000 comments at 1,200/s over 3 rooms, idle subtracted; load reports per node (3 runs; docs/benchmarks.md)
	for run in 1 2 3; do \
		DANMAKU_REQUIRE_SERVERS=1 DANMAKU_ROUNDTRIPS=1 $(GO) test -count=1 -run TestStackRoundTrips -v -timeout 10m ./cmd/danmaku | grep -E '^(--- |    roundtrips_test)'; \
	done

bench-limits: deps ## rate limits: 10 s entry pulse (workers 0 → 256) per rule set, per-IP and node-wide, 3 runs: admitted/s once a rule binds, /healthz p99, 5xx (docs/benchmarks.md)
	DANMAKU_REQUIRE_SERVERS=1 DANMAKU_PULSE_SECONDS=10 DANMAKU_PULSE_WORKERS=256 $(GO) test -run '^$$' -bench EntryPulse -benchtime 1x -count 3 -timeout 10m ./internal/loadgen

bench-gslb: deps ## gslb and tokens: allocation, entry over HTTP vs a bare handler (5 runs), token schemes and the hand-built path, load-table sync old vs new at 10x10/100x100/1000x10 (5 runs), idle edge CPU (docs/benchmarks.md)
	DANMAKU_REQUIRE_SERVERS=1 $(GO) test -run '^$$' -bench 'Allocate$$' -benchmem -count 5 ./gslb
	for run in 1 2 3 4 5; do \
		$(GO) test -run '^$$' -bench EntryHTTP -benchtime 20000x -count 1 ./gslb | grep req/s; \
	done
	$(GO) test -run '^$$' -bench 'TokenScheme|BenchmarkSign|BenchmarkTicketVerify' -benchmem -count 5 ./auth
	for run in 1 2 3 4 5; do \
		DANMAKU_REQUIRE_SERVERS=1 $(GO) test -run '^$$' -bench BenchmarkSync -benchtime 200x -count 1 -timeout 10m ./gslb | grep bytes/sync; \
	done
	DANMAKU_REQUIRE_SERVERS=1 DANMAKU_IDLE_SECONDS=4s $(GO) test -run '^$$' -bench IdleEdgeCPU -benchtime 1x -count 3 ./edge

bench-edge: deps ## edge: idle connection memory, fan-out CPU and latency at 10,000 connections (one process, 3 runs; plain against the edge terminating TLS, 3 pairs) and 100,000 (7 edge processes), connects with and without TLS (docs/benchmarks.md)
	$(GO) test -run '^$$' -bench 'IdleConnMemory|Fanout' -benchtime 1x -count 3 ./edge
	EDGE_SCALE_CONNS=10000 $(GO) test -run '^$$' -bench 'EdgeScale$$' -benchtime 1x -count 3 -timeout 20m ./edge
	for i in 1 2 3; do EDGE_SCALE_TLS=1 EDGE_SCALE_CONNS=10000 $(GO) test -run '^$$' -bench 'EdgeScale$$' -benchtime 1x -timeout 40m ./edge || exit 1; done
	EDGE_SCALE_CONNS=100000 $(GO) test -run '^$$' -bench 'EdgeScaleProcs$$' -benchtime 1x -count 1 -timeout 30m ./edge
	$(GO) test -run '^$$' -bench ConnectTLS -benchtime 2s -count 5 ./internal/stack

bench-web: deps ## demo page frames per second, CPU throttled 4x, 60 comments/s, 5 runs (docs/benchmarks.md)
	DANMAKU_REQUIRE_SERVERS=1 $(GO) test -run '^$$' -bench BrowserFPS -benchtime 1x -count 5 -timeout 10m ./internal/sdkweb

local-up: ## start the local stack (Redis, S3, CDN, Prometheus with the alert rules) in DANMAKU_LOCAL_DIR (default .local/)
	@bash infra/local/up.sh

local-down: ## stop the local stack (data stays)
	@bash infra/local/down.sh
