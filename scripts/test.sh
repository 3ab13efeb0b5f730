#!/usr/bin/env bash
# The whole test suite, as CI runs it, on a fresh Debian machine with Go:
#   ./scripts/test.sh
# It installs what the tests need (redis-server, promtool for the alert rules,
# and chromium for the pages rendered in a headless browser, via apt-get,
# when missing), checks and unit-tests the alert rules with promtool,
# starts a single Redis and a 3-master Redis Cluster on loopback, checks
# formatting and vet, runs every test with the race detector (fuzz seed corpora
# included), those of the rls module too (on the same servers), compiles the
# benchmarks module, proves the release (scripts/release: go install of both
# commands from a module proxy built from this tree, GOWORK=off; the first run
# on a machine compiles every dependency once more, with -trimpath), and stops
# the servers on exit.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n==> %s\n' "$*"; }

if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
	log "installing redis-server"
	SUDO=""
	if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq redis-server >/dev/null
fi

if ! command -v promtool >/dev/null 2>&1; then
	log "installing promtool (Debian's prometheus package)"
	SUDO=""
	if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi
command -v promtool >/dev/null 2>&1 || { echo "promtool still missing after apt-get install prometheus"; exit 1; }
# The Go test that checks the dashboard's queries with promtool fails
# rather than skips without it.
export FLOODGATE_REQUIRE_PROMTOOL=1

if ! command -v chromium >/dev/null 2>&1; then
	log "installing chromium"
	SUDO=""
	if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi

log "starting Redis (single node and cluster)"
./scripts/redis.sh start >/tmp/floodgate-redis.env
# shellcheck disable=SC1091
source /tmp/floodgate-redis.env
trap './scripts/redis.sh stop >/dev/null 2>&1 || true' EXIT
echo "FLOODGATE_REDIS_ADDR=${FLOODGATE_REDIS_ADDR}"
echo "FLOODGATE_REDIS_CLUSTER=${FLOODGATE_REDIS_CLUSTER}"

log "gofmt"
unformatted="$(gofmt -l . )"
if [ -n "$unformatted" ]; then
	echo "gofmt needed on:"; echo "$unformatted"; exit 1
fi

log "go vet"
go vet ./...
(cd benchmarks && go vet ./...)
(cd rls && go vet ./...)

log "alert rules: promtool check rules, promtool test rules"
promtool check rules deploy/prometheus/floodgate-rules.yml
(cd deploy/prometheus && promtool test rules floodgate-rules_test.yml)

log "go test -race"
go test -race -count=1 -timeout 8m ./...

log "lease: the fleet's accuracy figures without the race detector (it slows every process of a fleet test several times over)"
go test -count=1 -timeout 5m -run 'TestFleetShares|TestFleetSharesCluster|TestMultiProcess|TestOutagePolicies|TestShare|TestSimulation50Nodes' ./lease

log "rls module (the Envoy rate limit service): go test -race"
(cd rls && go test -race -count=1 -timeout 5m ./...)

log "floodgate command (cmd/floodgate): go vet and go test -race"
(cd cmd/floodgate && go vet ./... && go test -race -count=1 ./...)

log "rls answers as envoyproxy/ratelimit (built from its module), on the same Redis"
(cd rls/benchmarks && go vet ./... && go test -count=1 -timeout 5m ./...)

log "release: go install of both commands from a module proxy built from this tree (GOWORK=off)"
(cd scripts/release && go vet ./... && go test -count=1 -timeout 30m ./...)

log "benchmarks module compiles and its benchmarks run once"
(cd benchmarks && FLOODGATE_BENCH_KEYS=10000 go test -count=1 -run "^$" -bench . -benchtime 1x ./... >/dev/null)

log "all green"
