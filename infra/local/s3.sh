#!/usr/bin/env bash
# Local S3 (versitygw, posix backend) on 127.0.0.1:${DANMAKU_S3_PORT:-7070},
# objects in $DANMAKU_LOCAL_DIR/s3/data. On start it creates the bucket
# (${DANMAKU_S3_BUCKET:-danmaku}) with a policy that lets anyone GetObject, so
# the CDN stand-in can fetch without credentials.
# Usage: s3.sh [start|stop|status]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DIR="$LOCAL_DIR/s3"
PIDFILE="$DIR/versitygw.pid"
LOGFILE="$DIR/versitygw.log"
ENDPOINT="http://127.0.0.1:$S3_PORT"

do_start() {
	mkdir -p "$DIR/data"
	if running versitygw "$PIDFILE"; then
		log "s3: already running at $ENDPOINT"
	else
		port_busy "$S3_PORT" && die "port $S3_PORT is in use by another program (set DANMAKU_S3_PORT)"
		local bin
		bin="$(find_bin versitygw "go install github.com/versity/versitygw/cmd/versitygw@v1.8.0")"
		# The settings internal/testenv uses. Credentials are passed in the
		# environment so they do not show in ps.
		start_bg s3 "$PIDFILE" "$LOGFILE" env \
			ROOT_ACCESS_KEY_ID="$DANMAKU_S3_ACCESS_KEY" ROOT_SECRET_ACCESS_KEY="$DANMAKU_S3_SECRET_KEY" "$bin" \
			--port "127.0.0.1:$S3_PORT" --region "$S3_REGION" \
			--health /_health --keep-alive --quiet \
			posix "$DIR/data"
		wait_until versitygw "$PIDFILE" "$LOGFILE" http_ok "$S3_PORT" /_health
	fi
	# Idempotent: creates the bucket if missing and (re)sets its policy.
	(cd "$REPO_ROOT" && go run ./internal/testenv/cmd/s3bucket \
		-endpoint "$ENDPOINT" -region "$S3_REGION" -bucket "$S3_BUCKET")
	log "s3: ready at $ENDPOINT, bucket $S3_BUCKET, public reads at $ENDPOINT/$S3_BUCKET/KEY"
}

do_stop() { stop_pid versitygw "$PIDFILE"; }
do_status() { status_pid versitygw "$PIDFILE" "$ENDPOINT"; }

dispatch "${1:-start}"
