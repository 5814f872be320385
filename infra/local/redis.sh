#!/usr/bin/env bash
# Local Redis on 127.0.0.1:${DANMAKU_REDIS_PORT:-6390}, data in
# $DANMAKU_LOCAL_DIR/redis (append-only file, kept across restarts).
# Usage: redis.sh [start|stop|status]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DIR="$LOCAL_DIR/redis"
PIDFILE="$DIR/redis.pid"
LOGFILE="$DIR/redis.log"

do_start() {
	mkdir -p "$DIR"
	if running redis-server "$PIDFILE"; then
		log "redis: already running at 127.0.0.1:$REDIS_PORT"
		return 0
	fi
	port_busy "$REDIS_PORT" && die "port $REDIS_PORT is in use by another program (set DANMAKU_REDIS_PORT)"
	local bin
	bin="$(find_bin redis-server "Debian package redis-server")"
	start_bg redis "$PIDFILE" "$LOGFILE" "$bin" \
		--port "$REDIS_PORT" --bind 127.0.0.1 \
		--dir "$DIR" --appendonly yes --appendfsync always \
		--daemonize no --logfile ""
	wait_until redis-server "$PIDFILE" "$LOGFILE" redis_ping "$REDIS_PORT"
	log "redis: ready at 127.0.0.1:$REDIS_PORT"
}

do_stop() { stop_pid redis-server "$PIDFILE"; }
do_status() { status_pid redis-server "$PIDFILE" "127.0.0.1:$REDIS_PORT"; }

dispatch "${1:-start}"
