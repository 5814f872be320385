#!/usr/bin/env bash
# Local CDN stand-in (Varnish) on 127.0.0.1:${DANMAKU_CDN_PORT:-7080} in front
# of the local S3 bucket: GET /KEY is fetched from
# http://127.0.0.1:$DANMAKU_S3_PORT/$DANMAKU_S3_BUCKET/KEY and cached per
# infra/local/varnish.vcl. Working files in $DANMAKU_LOCAL_DIR/cdn; inspect
# with varnishstat/varnishlog/varnishadm -n <absolute path of that>/work
# (Varnish reads a relative -n as a name under /var/lib/varnish).
# Usage: cdn.sh [start|stop|status]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DIR="$LOCAL_DIR/cdn"
PIDFILE="$DIR/varnishd.pid"
LOGFILE="$DIR/varnishd.log"
URL="http://127.0.0.1:$CDN_PORT"

do_start() {
	mkdir -p "$DIR"
	if running varnishd "$PIDFILE"; then
		log "cdn: already running at $URL"
		return 0
	fi
	port_busy "$CDN_PORT" && die "port $CDN_PORT is in use by another program (set DANMAKU_CDN_PORT)"
	local bin
	bin="$(find_bin varnishd "Debian package varnish")"
	sed -e "s|@BACKEND_HOST@|127.0.0.1|g" \
		-e "s|@BACKEND_PORT@|$S3_PORT|g" \
		-e "s|@BACKEND_PREFIX@|/$S3_BUCKET|g" \
		"$REPO_ROOT/infra/local/varnish.vcl" >"$DIR/varnish.vcl"
	# -F: foreground, so the pid file names the manager; -j none: no
	# privilege drop, the working directory belongs to whoever runs this;
	# -T 127.0.0.1:0: management on a free port, found by varnishadm via -n.
	start_bg varnishd "$PIDFILE" "$LOGFILE" "$bin" -F -j none \
		-n "$DIR/work" -a "127.0.0.1:$CDN_PORT" -T 127.0.0.1:0 \
		-f "$DIR/varnish.vcl" -s malloc,256m
	wait_until varnishd "$PIDFILE" "$LOGFILE" http_ok "$CDN_PORT" /_cdn/health
	log "cdn: ready at $URL (GET $URL/KEY -> s3 $S3_BUCKET/KEY)"
}

do_stop() { stop_pid varnishd "$PIDFILE"; }
do_status() { status_pid varnishd "$PIDFILE" "$URL"; }

dispatch "${1:-start}"
