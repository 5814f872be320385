#!/usr/bin/env bash
# Local Prometheus on 127.0.0.1:${DANMAKU_PROMETHEUS_PORT:-9090} scraping every
# role on its default port, with the repository's alert and recording rules
# (infra/observability/rules). Data, the rendered prometheus.yml and the log in
# $DANMAKU_LOCAL_DIR/prometheus.
# Usage: prometheus.sh [start|stop|status|config]
#   config   prints the prometheus.yml that start would run with (the alert
#            test in infra/observability renders its own through it)
#
# Settings (environment, with defaults):
#   DANMAKU_PROMETHEUS_PORT     9090
#   DANMAKU_PROMETHEUS_TARGETS  gslb=127.0.0.1:7700,ingest=127.0.0.1:7701,
#                               edge=127.0.0.1:7702,origin=127.0.0.1:7703,
#                               slicer=127.0.0.1:7704
#                               ROLE=HOST:PORT,...: one target each, labelled
#                               role=ROLE. `danmaku dev` serves one registry on
#                               every port: give one target, dev=127.0.0.1:7700.
#   DANMAKU_PROMETHEUS_INTERVAL 5s  scrape and rule evaluation interval
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PROMETHEUS_PORT="${DANMAKU_PROMETHEUS_PORT:-9090}"
TARGETS="${DANMAKU_PROMETHEUS_TARGETS:-gslb=127.0.0.1:7700,ingest=127.0.0.1:7701,edge=127.0.0.1:7702,origin=127.0.0.1:7703,slicer=127.0.0.1:7704}"
INTERVAL="${DANMAKU_PROMETHEUS_INTERVAL:-5s}"
RULES_DIR="$REPO_ROOT/infra/observability/rules"
DIR="$LOCAL_DIR/prometheus"
PIDFILE="$DIR/prometheus.pid"
LOGFILE="$DIR/prometheus.log"
URL="http://127.0.0.1:$PROMETHEUS_PORT"

# render_config: prometheus.yml on stdout. One job, "danmaku", as the rules
# and dashboards expect (infra/observability/README.md); every target gets a
# role label.
render_config() {
	[[ $INTERVAL =~ ^[0-9]+(ms|s|m)$ ]] || die "DANMAKU_PROMETHEUS_INTERVAL=$INTERVAL: want a duration such as 500ms, 5s or 1m"
	local f entry role addr
	cat <<YAML
# Rendered by infra/local/prometheus.sh; edit the script's settings, not this.
global:
  scrape_interval: $INTERVAL
  scrape_timeout: $INTERVAL
  evaluation_interval: $INTERVAL
rule_files:
YAML
	for f in "$RULES_DIR"/*.yml; do
		[[ -f $f ]] || die "no rule files in $RULES_DIR"
		printf '  - %s\n' "$f"
	done
	cat <<YAML
scrape_configs:
  - job_name: danmaku
    static_configs:
YAML
	IFS=, read -r -a entries <<<"$TARGETS"
	((${#entries[@]} > 0)) || die "DANMAKU_PROMETHEUS_TARGETS is empty"
	for entry in "${entries[@]}"; do
		role="${entry%%=*}"
		addr="${entry#*=}"
		[[ $entry == *=* && $role =~ ^[a-z0-9_-]+$ && $addr =~ ^[A-Za-z0-9.:_-]+:[0-9]+$ ]] ||
			die "DANMAKU_PROMETHEUS_TARGETS: bad entry '$entry' (want ROLE=HOST:PORT, ROLE of a-z 0-9 _ -)"
		printf '      - targets: ["%s"]\n        labels: {role: "%s"}\n' "$addr" "$role"
	done
}

do_start() {
	mkdir -p "$DIR"
	if running prometheus "$PIDFILE"; then
		log "prometheus: already running at $URL"
		return 0
	fi
	port_busy "$PROMETHEUS_PORT" && die "port $PROMETHEUS_PORT is in use by another program (set DANMAKU_PROMETHEUS_PORT)"
	local bin
	bin="$(find_bin prometheus "Debian package prometheus")"
	render_config >"$DIR/prometheus.yml"
	start_bg prometheus "$PIDFILE" "$LOGFILE" "$bin" \
		--config.file="$DIR/prometheus.yml" \
		--storage.tsdb.path="$DIR/data" --storage.tsdb.retention.time=2d \
		--web.listen-address="127.0.0.1:$PROMETHEUS_PORT"
	wait_until prometheus "$PIDFILE" "$LOGFILE" http_ok "$PROMETHEUS_PORT" /-/ready
	log "prometheus: ready at $URL (alerts: $URL/alerts, targets: $URL/targets)"
}

do_stop() { stop_pid prometheus "$PIDFILE"; }
do_status() { status_pid prometheus "$PIDFILE" "$URL"; }

case "${1:-start}" in
config) render_config ;;
*) dispatch "${1:-start}" ;;
esac
