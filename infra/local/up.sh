#!/usr/bin/env bash
# Starts the local stack — Redis, S3 (versitygw), the CDN stand-in (Varnish)
# and Prometheus with the repository's alert rules — on fixed loopback ports
# and prints their addresses. Safe to run again: running servers are left
# alone. See infra/local/README.md.
set -euo pipefail
here="$(dirname "${BASH_SOURCE[0]}")"
source "$here/lib.sh"

bash "$here/redis.sh" start
bash "$here/s3.sh" start
bash "$here/cdn.sh" start
bash "$here/prometheus.sh" start

cat <<MSG

Local stack is up (data, logs and pid files in $LOCAL_DIR):
  Redis  127.0.0.1:$REDIS_PORT
  S3     http://127.0.0.1:$S3_PORT  region $S3_REGION  bucket $S3_BUCKET
         access key $DANMAKU_S3_ACCESS_KEY  secret key $DANMAKU_S3_SECRET_KEY  (path-style)
  CDN    http://127.0.0.1:$CDN_PORT  (GET /KEY is served from bucket $S3_BUCKET)
         stats: varnishstat -n $LOCAL_DIR/cdn/work
  Prometheus http://127.0.0.1:${DANMAKU_PROMETHEUS_PORT:-9090}  scraping the roles' default ports 7700-7704
         (for danmaku dev: DANMAKU_PROMETHEUS_TARGETS=dev=127.0.0.1:7700 infra/local/prometheus.sh; see its header)
Stop it with: make local-down   (data stays; delete $LOCAL_DIR to start afresh)
MSG
