#!/usr/bin/env bash
# Local Redis Cluster: three masters and three replicas on 127.0.0.1, ports
# ${DANMAKU_CLUSTER_PORT:-6391} and the five after it (cluster bus: each
# port + 10000), data in $DANMAKU_LOCAL_DIR/cluster/PORT (append-only file
# fsynced on every write, and the node's nodes.conf, kept across restarts).
# The first start creates the cluster (redis-cli --cluster create); later
# starts bring the same nodes back, and they find each other by nodes.conf.
# Usage: cluster.sh [start|stop|status]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CLUSTER_PORT="${DANMAKU_CLUSTER_PORT:-6391}"
DIR="$LOCAL_DIR/cluster"
# cluster-node-timeout: a master unreachable this long is failed over to
# its replica. Production keeps the default (15 s) or close; a short one
# lets you watch a failover (kill a master) in a few seconds.
NODE_TIMEOUT_MS="${DANMAKU_CLUSTER_NODE_TIMEOUT_MS:-2000}"

ports() { seq "$CLUSTER_PORT" $((CLUSTER_PORT + 5)); }
pidfile() { echo "$DIR/$1/redis.pid"; }
seeds() { ports | sed 's/^/127.0.0.1:/' | paste -sd, -; }

# cluster_field PORT FIELD: FIELD's value in CLUSTER INFO of the node.
cluster_field() {
	redis-cli -p "$1" cluster info 2>/dev/null | tr -d '\r' | sed -n "s/^$2://p"
}

cluster_ok() {
	local port
	for port in $(ports); do
		[[ $(cluster_field "$port" cluster_state) == ok ]] || return 1
		[[ $(cluster_field "$port" cluster_slots_ok) == 16384 ]] || return 1
	done
}

start_node() {
	local port=$1 bin=$2 dir="$DIR/$1"
	mkdir -p "$dir"
	if running redis-server "$(pidfile "$port")"; then
		log "cluster: node $port already running"
		return 0
	fi
	port_busy "$port" && die "port $port is in use by another program (set DANMAKU_CLUSTER_PORT)"
	port_busy $((port + 10000)) && die "cluster bus port $((port + 10000)) is in use by another program (set DANMAKU_CLUSTER_PORT)"
	start_bg "cluster node $port" "$(pidfile "$port")" "$dir/redis.log" "$bin" \
		--port "$port" --bind 127.0.0.1 --dir "$dir" \
		--cluster-enabled yes --cluster-config-file nodes.conf \
		--cluster-node-timeout "$NODE_TIMEOUT_MS" --cluster-port $((port + 10000)) \
		--appendonly yes --appendfsync always \
		--repl-diskless-sync-delay 0 \
		--daemonize no --logfile ""
	wait_until "cluster node $port" "$(pidfile "$port")" "$dir/redis.log" redis_ping "$port"
}

do_start() {
	local bin port i
	bin="$(find_bin redis-server "Debian package redis-server")"
	find_bin redis-cli "Debian package redis-tools" >/dev/null
	for port in $(ports); do
		start_node "$port" "$bin"
	done
	# A node that has only met itself is new: create the cluster. Nodes
	# that know each other (restarted with their nodes.conf) rejoin alone.
	if [[ $(cluster_field "$CLUSTER_PORT" cluster_known_nodes) == 1 ]]; then
		log "cluster: creating it (3 masters, 3 replicas)"
		# shellcheck disable=SC2046
		redis-cli --cluster create $(ports | sed 's/^/127.0.0.1:/') --cluster-replicas 1 --cluster-yes >"$DIR/create.log" 2>&1 ||
			{ cat "$DIR/create.log" >&2; die "redis-cli --cluster create failed (log $DIR/create.log)"; }
	fi
	for ((i = 0; i < 150; i++)); do
		if cluster_ok; then
			log "cluster: ready; seeds $(seeds)"
			log "  export DANMAKU_REDIS=$(seeds)"
			return 0
		fi
		sleep 0.2
	done
	redis-cli -p "$CLUSTER_PORT" cluster nodes >&2 || true
	die "cluster not ok after 30 s (logs in $DIR/PORT/redis.log)"
}

do_stop() {
	local port
	for port in $(ports); do
		log "cluster node $port:"
		stop_pid redis-server "$(pidfile "$port")"
	done
}

do_status() {
	local port down=0
	for port in $(ports); do
		if running redis-server "$(pidfile "$port")"; then
			log "cluster node $port: running pid $(cat "$(pidfile "$port")")"
		else
			log "cluster node $port: not running"
			down=1
		fi
	done
	if ((down == 0)) && cluster_ok; then
		log "cluster: ok; seeds $(seeds)"
		# address, flags (master/slave, fail), slots served
		redis-cli -p "$CLUSTER_PORT" cluster nodes | awk '{s = ""; for (i = 9; i <= NF; i++) s = s " " $i; print "  " $2, $3 s}' | sort
		return 0
	fi
	log "cluster: not ok"
	return 1
}

dispatch "${1:-start}"
