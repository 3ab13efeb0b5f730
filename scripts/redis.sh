#!/usr/bin/env bash
# scripts/redis.sh start|stop|status
#
# Starts (or stops) the real Redis servers the floodgate tests run against:
#   - one redis-server on 127.0.0.1:16379 (FLOODGATE_REDIS_ADDR)
#   - a 3-master Redis Cluster on 127.0.0.1:17001-17003 (FLOODGATE_REDIS_CLUSTER)
# in a temporary directory, and prints the export lines for both, e.g.
#   eval "$(scripts/redis.sh start)"
# Installs redis-server with apt-get when it is missing (the test machines run
# as root). Everything binds to 127.0.0.1 only. Ports can be moved with
# FLOODGATE_REDIS_PORT (default 16379) and FLOODGATE_CLUSTER_BASE (default 17001).
set -euo pipefail

PORT="${FLOODGATE_REDIS_PORT:-16379}"
BASE="${FLOODGATE_CLUSTER_BASE:-17001}"
CPORTS=("$BASE" "$((BASE + 1))" "$((BASE + 2))")
STATE="${TMPDIR:-/tmp}/floodgate-redis-${PORT}-${BASE}.dir"

log() { echo "redis.sh: $*" >&2; }

ensure_installed() {
	if command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1; then
		return
	fi
	log "installing redis-server with apt-get"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >&2
	apt-get install -y -qq redis-server redis-tools >&2
	# The Debian package may start a system-wide server on 6379; we do not use it.
	command -v redis-server >/dev/null 2>&1 || { log "redis-server still missing after apt-get"; exit 1; }
}

ping() { redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null | grep -q PONG; }

start_server() { # port dir [extra args...]
	local port=$1 dir=$2
	shift 2
	redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no \
		--daemonize yes --dir "$dir" --pidfile "$dir/redis-$port.pid" \
		--logfile "$dir/redis-$port.log" "$@"
	for _ in $(seq 1 100); do
		ping "$port" && return 0
		sleep 0.05
	done
	log "redis-server on port $port did not answer; log:"
	cat "$dir/redis-$port.log" >&2 || true
	exit 1
}

cluster_ok() {
	local p
	for p in "${CPORTS[@]}"; do
		redis-cli -h 127.0.0.1 -p "$p" cluster info 2>/dev/null | grep -q '^cluster_state:ok' || return 1
		redis-cli -h 127.0.0.1 -p "$p" cluster info 2>/dev/null | grep -q '^cluster_slots_ok:16384' || return 1
	done
}

print_exports() {
	echo "export FLOODGATE_REDIS_ADDR=127.0.0.1:$PORT"
	echo "export FLOODGATE_REDIS_CLUSTER=127.0.0.1:${CPORTS[0]},127.0.0.1:${CPORTS[1]},127.0.0.1:${CPORTS[2]}"
}

stop() {
	local dir pid f
	[ -f "$STATE" ] || return 0
	dir=$(cat "$STATE")
	for f in "$dir"/redis-*.pid; do
		[ -f "$f" ] || continue
		pid=$(cat "$f")
		kill "$pid" 2>/dev/null || true
		for _ in $(seq 1 50); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.05
		done
		kill -9 "$pid" 2>/dev/null || true
	done
	rm -rf "$dir" "$STATE"
}

start() {
	ensure_installed
	if [ -f "$STATE" ] && ping "$PORT" && cluster_ok; then
		log "already running ($(cat "$STATE"))"
		print_exports
		return
	fi
	stop
	local dir p
	for p in "$PORT" "${CPORTS[@]}"; do
		if ping "$p"; then
			log "port $p already answers PING and is not ours: stop that server, or move ours with FLOODGATE_REDIS_PORT / FLOODGATE_CLUSTER_BASE"
			exit 1
		fi
	done
	dir=$(mktemp -d "${TMPDIR:-/tmp}/floodgate-redis.XXXXXX")
	echo "$dir" >"$STATE"
	start_server "$PORT" "$dir"
	for p in "${CPORTS[@]}"; do
		start_server "$p" "$dir" --cluster-enabled yes --cluster-config-file "$dir/nodes-$p.conf" \
			--cluster-node-timeout 2000
	done
	redis-cli --cluster create "127.0.0.1:${CPORTS[0]}" "127.0.0.1:${CPORTS[1]}" "127.0.0.1:${CPORTS[2]}" \
		--cluster-replicas 0 --cluster-yes >"$dir/cluster-create.log" 2>&1 || {
		cat "$dir/cluster-create.log" >&2
		exit 1
	}
	for _ in $(seq 1 200); do
		if cluster_ok; then
			log "single node on $PORT, cluster on ${CPORTS[*]} ($dir)"
			print_exports
			return
		fi
		sleep 0.05
	done
	log "cluster did not reach state ok"
	exit 1
}

case "${1:-}" in
start) start ;;
stop) stop ;;
status)
	if [ -f "$STATE" ] && ping "$PORT" && cluster_ok; then
		print_exports
	else
		exit 1
	fi
	;;
*)
	echo "usage: $0 start|stop|status" >&2
	exit 2
	;;
esac
