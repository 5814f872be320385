#!/usr/bin/env bash
# The screenshot of docs/: `danmaku dev` under `danmaku loadgen`, scraped by
# the local Prometheus (infra/local/prometheus.sh, with the repository's
# rules), and a dashboard rendered from it by render.mjs in chromium.
#   bash infra/observability/render/screenshot.sh [DASHBOARD] [OUT.png]
# Defaults: dashboards/show.json, docs/dashboard-show.png. Needs make deps
# and bash sdk/web/deps.sh. Loopback only; everything it starts it stops.
# Env: DURATION of the load (default 180s), PORT_BASE (default 17700: the
# roles on 17700-17704, Prometheus on PORT_BASE+2390), and loadgen's load:
# RATE (400/s), USERS (150, unthrottled: some exceed the user bucket), GIFTS
# (5/s), POLLERS (100, holding the edge).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
dash="${1:-$repo/infra/observability/dashboards/show.json}"
out="${2:-$repo/docs/dashboard-show.png}"
base="${PORT_BASE:-17700}"
duration="${DURATION:-180s}"
work="$(mktemp -d "${TMPDIR:-/tmp}/danmaku-screenshot.XXXXXX")"
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	DANMAKU_LOCAL_DIR="$work/local" DANMAKU_PROMETHEUS_PORT=$((base + 2390)) bash "$repo/infra/local/prometheus.sh" stop >/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

go build -o "$work/danmaku" "$repo/cmd/danmaku"
"$work/danmaku" dev -gslb "127.0.0.1:$base" -ingest "127.0.0.1:$((base + 1))" -edge "127.0.0.1:$((base + 2))" \
	-origin "127.0.0.1:$((base + 3))" -slicer "127.0.0.1:$((base + 4))" >"$work/dev.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
	curl -fsS "http://127.0.0.1:$base/healthz" >/dev/null 2>&1 && break
	sleep 0.2
done
curl -fsS "http://127.0.0.1:$base/healthz" >/dev/null

export DANMAKU_LOCAL_DIR="$work/local" DANMAKU_PROMETHEUS_PORT=$((base + 2390))
DANMAKU_PROMETHEUS_TARGETS="dev=127.0.0.1:$base" DANMAKU_PROMETHEUS_INTERVAL=2s bash "$repo/infra/local/prometheus.sh" start

secs="${duration%s}"
[[ $secs =~ ^[0-9]+$ && $secs -ge 30 ]] || { echo "screenshot.sh: DURATION is whole seconds, at least 30s" >&2; exit 2; }
"$work/danmaku" loadgen -gslb "http://127.0.0.1:$base" -room demo -rate "${RATE:-400/s}" -users "${USERS:-150}" -unthrottled \
	-gifts "${GIFTS:-5/s}" -pollers "${POLLERS:-100}" -poller-edge -duration "$duration" -quiet -json "$work/report.json" 2>"$work/loadgen.txt" &
loadgen=$!
pids+=("$loadgen")
# The picture is taken while the load still runs (viewers connected).
sleep $((secs - 10))
PROMETHEUS="http://127.0.0.1:$DANMAKU_PROMETHEUS_PORT" RANGE=$((secs + 20)) STEP=2 node "$repo/infra/observability/render/render.mjs" "$dash" "$out"
wait "$loadgen"
cat "$work/loadgen.txt" >&2
