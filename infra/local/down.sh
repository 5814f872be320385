#!/usr/bin/env bash
# Stops the local stack started by up.sh. Data stays in $DANMAKU_LOCAL_DIR.
set -euo pipefail
here="$(dirname "${BASH_SOURCE[0]}")"

bash "$here/prometheus.sh" stop
bash "$here/cdn.sh" stop
bash "$here/s3.sh" stop
bash "$here/redis.sh" stop
