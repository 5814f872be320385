#!/bin/bash
# Observability of a danmaku machine (Amazon Linux 2023), run once as root at
# boot, before node-boot.sh starts the role. observability.tf prepends the
# OBS_* settings of the machine's role (output observability_boot); nothing
# in it is secret.
#
# - The role's output (JSON logs, -log-json) goes to /var/log/danmaku/
#   danmaku.log, which the CloudWatch agent ships to the role's log group,
#   one stream per instance.
# - With OBS_AGENT set, a Prometheus in agent mode scrapes the role on
#   127.0.0.1 (job danmaku, labels role and instance, as the rules in
#   infra/observability expect) and remote-writes to the event's workspace
#   with SigV4, as the metrics writer role (OBS_WRITER_ROLE_ARN), which the
#   instance role may assume and nothing else may.
set -euo pipefail

: "${OBS_EVENT:?}" "${OBS_ROLE:?}" "${OBS_REGION:?}" "${OBS_PORT:?}" "${OBS_LOG_GROUP:?}"
: "${OBS_REMOTE_WRITE_URL:?}" "${OBS_WRITER_ROLE_ARN:?}" "${OBS_SCRAPE_INTERVAL:?}"
: "${OBS_AGENT=}" "${OBS_AGENT_SHA256=}" "${OBS_SCHEME=http}"
export AWS_REGION="$OBS_REGION" AWS_RETRY_MODE=adaptive AWS_MAX_ATTEMPTS=15

imds_token="$(curl -fsS -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 600' http://169.254.169.254/latest/api/token)"
instance_id="$(curl -fsS -H "X-aws-ec2-metadata-token: $imds_token" http://169.254.169.254/latest/meta-data/instance-id)"

# --- logs ----------------------------------------------------------------------
install -d -m 0755 /var/log/danmaku
# A drop-in for the unit node-boot.sh writes: systemd opens the file (as
# root) before the role's user takes over.
install -d -m 0755 /etc/systemd/system/danmaku.service.d
cat >/etc/systemd/system/danmaku.service.d/50-log-file.conf <<'EOF2'
[Service]
StandardOutput=append:/var/log/danmaku/danmaku.log
StandardError=append:/var/log/danmaku/danmaku.log
EOF2
# The agent follows the file across copytruncate; a full disk would stop
# the role, so the local copy stays small.
cat >/etc/logrotate.d/danmaku <<'EOF2'
/var/log/danmaku/danmaku.log {
    hourly
    maxsize 256M
    rotate 4
    compress
    missingok
    notifempty
    copytruncate
}
EOF2
dnf install -y -q amazon-cloudwatch-agent
cw_config=/opt/aws/amazon-cloudwatch-agent/etc/danmaku.json
cat >"$cw_config" <<EOF2
{
  "agent": {"run_as_user": "root", "region": "$OBS_REGION"},
  "logs": {
    "force_flush_interval": 5,
    "logs_collected": {"files": {"collect_list": [{
      "file_path": "/var/log/danmaku/danmaku.log",
      "log_group_name": "$OBS_LOG_GROUP",
      "log_stream_name": "$instance_id"
    }]}}
  }
}
EOF2
/opt/aws/amazon-cloudwatch-agent/bin/amazon-cloudwatch-agent-ctl -a fetch-config -m ec2 -s -c "file:$cw_config"

# --- metrics ------------------------------------------------------------------
if [[ -n $OBS_AGENT ]]; then
	aws s3 cp --only-show-errors "$OBS_AGENT" /usr/local/bin/prometheus-agent.download
	if [[ -n $OBS_AGENT_SHA256 ]]; then
		echo "$OBS_AGENT_SHA256  /usr/local/bin/prometheus-agent.download" | sha256sum --check --quiet -
	fi
	install -m 0755 /usr/local/bin/prometheus-agent.download /usr/local/bin/prometheus-agent
	rm -f /usr/local/bin/prometheus-agent.download
	# Prometheus 3 has --agent; 2.32 to 2.x the agent feature flag.
	agent_flag="--enable-feature=agent"
	if /usr/local/bin/prometheus-agent --help 2>&1 | grep -q -- '--agent'; then
		agent_flag="--agent"
	fi
	install -d -m 0755 /etc/danmaku
	cat >/etc/danmaku/prometheus-agent.yml <<EOF2
global:
  scrape_interval: $OBS_SCRAPE_INTERVAL
  external_labels:
    event: "$OBS_EVENT"
scrape_configs:
  - job_name: danmaku
    # The role's metrics port (the edge's and the ingest's -metrics-addr,
    # never their public port): plain HTTP.
    scheme: $OBS_SCHEME
    static_configs:
      - targets: ["127.0.0.1:$OBS_PORT"]
        labels:
          role: "$OBS_ROLE"
          instance: "$instance_id"
remote_write:
  - url: "$OBS_REMOTE_WRITE_URL"
    sigv4:
      region: "$OBS_REGION"
      role_arn: "$OBS_WRITER_ROLE_ARN"
EOF2
	cat >/etc/systemd/system/danmaku-metrics.service <<EOF2
[Unit]
Description=danmaku $OBS_ROLE metrics to the event's Prometheus workspace
Wants=network-online.target
After=network-online.target

[Service]
DynamicUser=yes
StateDirectory=danmaku-metrics
ExecStart=/usr/local/bin/prometheus-agent $agent_flag --config.file=/etc/danmaku/prometheus-agent.yml --storage.agent.path=/var/lib/danmaku-metrics --web.listen-address=127.0.0.1:9090
Restart=always
RestartSec=5
NoNewPrivileges=yes

[Install]
WantedBy=multi-user.target
EOF2
	systemctl daemon-reload
	systemctl enable --now danmaku-metrics.service
fi
systemctl daemon-reload
echo "observability-boot: $OBS_ROLE logs to $OBS_LOG_GROUP${OBS_AGENT:+, metrics to the workspace}"
