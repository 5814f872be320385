#!/bin/bash
# Boot script of every danmaku machine (Amazon Linux 2023), run once as root
# by cloud-init. compute.tf prepends the BOOT_* settings of the machine's
# role to it and hands the result over as user data; nothing in it is
# secret.
#
# It installs the release binary, writes the role's configuration, gives an
# edge or ingest machine its public name and its TLS certificate, and starts
# the role under systemd as the unprivileged user danmaku, restarted for as
# long as it takes. Secrets are fetched by danmaku-start each time the role
# starts and live only in the process's environment. A role without a load
# balancer checks its own health (danmaku-health) and has its machine
# replaced when it stays down.
set -euo pipefail

: "${BOOT_ROLE:?}" "${BOOT_REGION:?}" "${BOOT_ENV_B64:?}" "${BOOT_ARGS_B64:?}"
: "${BOOT_RELEASE=}" "${BOOT_RELEASE_SHA256=}" "${BOOT_NODE_NAME_PREFIX=}" "${BOOT_NODE_DOMAIN=}"
: "${BOOT_ZONE_ID=}" "${BOOT_URL_ENV=}" "${BOOT_URL_SCHEME=}" "${BOOT_URL_PATH=}" "${BOOT_PUBLIC_PORT=}"
: "${BOOT_NODE_RECORD_TTL=60}" "${BOOT_TLS_SECRET=}" "${BOOT_TLS_CERT=}" "${BOOT_TLS_KEY=}"
: "${BOOT_HEALTH_URL=}" "${BOOT_UNHEALTHY_AFTER=120}" "${BOOT_BIND_PRIVILEGED=0}"

# Hundreds of machines boot at once before a show; adaptive retries spread
# their calls instead of failing on the first throttling answer (Route 53
# takes 5 changes a second per account).
export AWS_REGION="$BOOT_REGION" AWS_RETRY_MODE=adaptive AWS_MAX_ATTEMPTS=15

imds_token="$(curl -fsS -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 600' http://169.254.169.254/latest/api/token)"
imds() { curl -fsS -H "X-aws-ec2-metadata-token: $imds_token" "http://169.254.169.254/latest/meta-data/$1"; }
instance_id="$(imds instance-id)"

# --- kernel: room for 100,000 connections ----------------------------------
cat >/etc/sysctl.d/90-danmaku.conf <<'EOF'
fs.file-max = 4194304
net.core.somaxconn = 65535
net.core.netdev_max_backlog = 65535
net.ipv4.tcp_max_syn_backlog = 65535
net.ipv4.ip_local_port_range = 1024 65535
net.ipv4.tcp_fin_timeout = 15
net.ipv4.tcp_tw_reuse = 1
EOF
sysctl --system >/dev/null

# --- the release: downloaded, or baked into the image ----------------------
if [[ -n $BOOT_RELEASE ]]; then
	aws s3 cp --only-show-errors "$BOOT_RELEASE" /usr/local/bin/danmaku.download
	install -m 0755 /usr/local/bin/danmaku.download /usr/local/bin/danmaku
	rm -f /usr/local/bin/danmaku.download
fi
if [[ -n $BOOT_RELEASE_SHA256 ]]; then
	echo "$BOOT_RELEASE_SHA256  /usr/local/bin/danmaku" | sha256sum --check --quiet -
fi

# The role's own user: it alone reads the node's private key.
if ! id danmaku >/dev/null 2>&1; then
	useradd --system --no-create-home --home-dir /run/danmaku --shell /sbin/nologin danmaku
fi

# --- configuration: no secret values in any of these files -----------------
install -d -m 0755 /etc/danmaku
# The role's environment file (the event's env_ROLE output): KEY='value'
# lines, and a "# secret NAME ARN" comment for each secret.
base64 -d <<<"$BOOT_ENV_B64" >/etc/danmaku/danmaku.env
echo "DANMAKU_NODE_ID='$instance_id'" >>/etc/danmaku/danmaku.env
# One command-line argument per line.
base64 -d <<<"$BOOT_ARGS_B64" >/etc/danmaku/args
cat >/etc/danmaku/boot.env <<EOF
ROLE='$BOOT_ROLE'
REGION='$BOOT_REGION'
INSTANCE_ID='$instance_id'
HEALTH_URL='$BOOT_HEALTH_URL'
UNHEALTHY_AFTER='$BOOT_UNHEALTHY_AFTER'
EOF

# --- public name (edge, ingest) ---------------------------------------------
dns_unit=""
if [[ -n $BOOT_NODE_NAME_PREFIX ]]; then
	# Named after the instance: unique without coordination, the same after
	# a stop and start (the address is not), and what node_records.tf
	# deletes when the instance goes.
	node_name="$BOOT_NODE_NAME_PREFIX-$instance_id.$BOOT_NODE_DOMAIN"
	port_part=""
	if [[ $BOOT_PUBLIC_PORT != 443 ]]; then
		port_part=":$BOOT_PUBLIC_PORT"
	fi
	# Tokens are bound to this URL: it must be exactly what the gslb hands out.
	echo "$BOOT_URL_ENV='$BOOT_URL_SCHEME://$node_name$port_part$BOOT_URL_PATH'" >>/etc/danmaku/danmaku.env
	cat >>/etc/danmaku/boot.env <<EOF
NODE_NAME='$node_name'
ZONE_ID='$BOOT_ZONE_ID'
NODE_RECORD_TTL='$BOOT_NODE_RECORD_TTL'
EOF

	cat >/usr/local/sbin/danmaku-dns <<'EOF'
#!/bin/bash
# danmaku-dns UPSERT|DELETE: publishes or withdraws this machine's name,
# pointing at its public address of the moment.
set -euo pipefail
. /etc/danmaku/boot.env
export AWS_REGION="$REGION" AWS_RETRY_MODE=adaptive AWS_MAX_ATTEMPTS=15
token="$(curl -fsS -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 60' http://169.254.169.254/latest/api/token)"
public_ip="$(curl -fsS -H "X-aws-ec2-metadata-token: $token" http://169.254.169.254/latest/meta-data/public-ipv4)"
batch="$(printf '{"Changes":[{"Action":"%s","ResourceRecordSet":{"Name":"%s","Type":"A","TTL":%s,"ResourceRecords":[{"Value":"%s"}]}}]}' "$1" "$NODE_NAME" "$NODE_RECORD_TTL" "$public_ip")"
if ! change="$(aws route53 change-resource-record-sets --hosted-zone-id "$ZONE_ID" --change-batch "$batch" --query ChangeInfo.Id --output text)"; then
	# At shutdown the name may be gone already: EC2's shutting-down event
	# has the cleaner delete it too (node_records.tf).
	[[ $1 == DELETE ]] && exit 0
	exit 1
fi
# The role reports itself to the gslb only once its name resolves: a
# resolver asked too early would cache the NXDOMAIN for the zone's
# negative TTL.
if [[ $1 == UPSERT ]]; then
	aws route53 wait resource-record-sets-changed --id "$change"
fi
EOF
	chmod 0755 /usr/local/sbin/danmaku-dns
	# Stopped after the role (it is ordered before it), so a machine that
	# shuts down drains its clients first and withdraws its name last.
	cat >/etc/systemd/system/danmaku-dns.service <<'EOF'
[Unit]
Description=publish this machine's danmaku node name
Wants=network-online.target
After=network-online.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/sbin/danmaku-dns UPSERT
ExecStop=/usr/local/sbin/danmaku-dns DELETE
TimeoutStartSec=600

[Install]
WantedBy=multi-user.target
EOF
	dns_unit="danmaku-dns.service"
fi

# --- TLS (edge, ingest, when a certificate is configured) ------------------
# The role serves TLS itself (its -ROLE-tls-cert and -ROLE-tls-key flags
# name these files): no proxy in between, so a client's address is the
# socket's. The files are re-fetched every 6 hours and replaced only when
# the secret changed; the role re-reads them when they change.
tls_unit=""
if [[ -n $BOOT_TLS_SECRET ]]; then
	cat >>/etc/danmaku/boot.env <<EOF
TLS_SECRET='$BOOT_TLS_SECRET'
TLS_CERT='$BOOT_TLS_CERT'
TLS_KEY='$BOOT_TLS_KEY'
EOF
	install -d -m 0750 -o root -g danmaku "$(dirname "$BOOT_TLS_CERT")" "$(dirname "$BOOT_TLS_KEY")"
	cat >/usr/local/sbin/danmaku-tls-fetch <<'EOF'
#!/bin/bash
# danmaku-tls-fetch: writes the node certificate chain and private key from
# their Secrets Manager bundle, owned by and readable only by danmaku. Each
# file is replaced by a rename, so the role never reads half of one; a
# pair caught between the two renames does not load, and the role keeps
# the last good one until it does.
set -euo pipefail
. /etc/danmaku/boot.env
export AWS_REGION="$REGION" AWS_RETRY_MODE=adaptive AWS_MAX_ATTEMPTS=15
umask 077
tmp="$(mktemp -d "$(dirname "$TLS_KEY")/.fetch.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
aws secretsmanager get-secret-value --secret-id "$TLS_SECRET" --query SecretString --output text >"$tmp/bundle.pem"
# The bundle holds the key and the chain, in any order.
awk -v key="$tmp/key.pem" -v cert="$tmp/cert.pem" '
	/^-----BEGIN .*PRIVATE KEY-----/ { out = key }
	/^-----BEGIN CERTIFICATE-----/ { out = cert }
	out != "" { print > out }
	/^-----END / { out = "" }
' "$tmp/bundle.pem"
if [[ ! -s $tmp/key.pem || ! -s $tmp/cert.pem ]]; then
	echo "danmaku-tls-fetch: $TLS_SECRET must hold a PEM private key and certificate chain" >&2
	exit 1
fi
if cmp -s "$tmp/key.pem" "$TLS_KEY" && cmp -s "$tmp/cert.pem" "$TLS_CERT"; then
	exit 0
fi
chown danmaku:danmaku "$tmp/key.pem" "$tmp/cert.pem"
chmod 0400 "$tmp/key.pem" "$tmp/cert.pem"
mv -f "$tmp/key.pem" "$TLS_KEY"
mv -f "$tmp/cert.pem" "$TLS_CERT"
EOF
	chmod 0755 /usr/local/sbin/danmaku-tls-fetch
	cat >/etc/systemd/system/danmaku-tls.service <<'EOF'
[Unit]
Description=fetch this machine's danmaku TLS certificate
Wants=network-online.target
After=network-online.target

[Service]
Type=oneshot
ExecStart=/usr/local/sbin/danmaku-tls-fetch
EOF
	cat >/etc/systemd/system/danmaku-tls.timer <<'EOF'
[Unit]
Description=re-fetch this machine's danmaku TLS certificate

[Timer]
OnUnitActiveSec=6h
RandomizedDelaySec=30m

[Install]
WantedBy=timers.target
EOF
	tls_unit="danmaku-tls.service"
fi

# --- the role ---------------------------------------------------------------
cat >/usr/local/bin/danmaku-start <<'EOF'
#!/bin/bash
# Starts the role with its secrets in its environment. They are fetched at
# every start, so a restart picks up a rotated secret, and never written to
# disk.
set -euo pipefail
. /etc/danmaku/boot.env
while read -r hash kind name arn; do
	[[ $hash == "#" && $kind == secret ]] || continue
	value="$(aws secretsmanager get-secret-value --region "$REGION" --secret-id "$arn" --query SecretString --output text)"
	export "$name=$value"
done </etc/danmaku/danmaku.env
mapfile -t args </etc/danmaku/args
exec /usr/local/bin/danmaku "$ROLE" "${args[@]}"
EOF
chmod 0755 /usr/local/bin/danmaku-start

# Port 443 is a privileged port: the role gets that one capability, and
# no other.
capabilities="CapabilityBoundingSet="
if [[ $BOOT_BIND_PRIVILEGED == 1 ]]; then
	capabilities="AmbientCapabilities=CAP_NET_BIND_SERVICE
CapabilityBoundingSet=CAP_NET_BIND_SERVICE"
fi
cat >/etc/systemd/system/danmaku.service <<EOF
[Unit]
Description=danmaku $BOOT_ROLE
Wants=network-online.target $dns_unit $tls_unit
After=network-online.target $dns_unit $tls_unit
Requires=$dns_unit
# Never give up: a role that cannot start (Redis failing over, a secret
# not readable yet) is started again every 2 s for as long as it takes.
# danmaku-health has the machine replaced if that is too long.
StartLimitIntervalSec=0

[Service]
User=danmaku
Group=danmaku
RuntimeDirectory=danmaku
Environment=HOME=/run/danmaku
EnvironmentFile=/etc/danmaku/danmaku.env
ExecStart=/usr/local/bin/danmaku-start
Restart=always
RestartSec=2
LimitNOFILE=1048576
# An edge drains its connections over 10 s on SIGTERM.
TimeoutStopSec=30
NoNewPrivileges=yes
$capabilities

[Install]
WantedBy=multi-user.target
EOF

# --- health (roles without a load balancer) --------------------------------
health_timer=""
if [[ -n $BOOT_HEALTH_URL ]]; then
	cat >/usr/local/sbin/danmaku-health <<'EOF'
#!/bin/bash
# danmaku-health: one look at the role (danmaku-health.timer, every 10 s).
# A role that has not answered its /healthz for UNHEALTHY_AFTER seconds —
# crashed and restarting, hung, or never ready — marks this machine
# unhealthy, and its auto scaling group replaces it (not within the
# group's grace period after launch). The first failure's time lives in
# /run: a reboot starts over.
set -uo pipefail
. /etc/danmaku/boot.env
since_file=/run/danmaku-health.since
now="$(date +%s)"
# -k: this checks the role, not its certificate (a certificate about to
# expire is no reason to replace the machine).
if systemctl is-active --quiet danmaku.service && curl -fsS -k -o /dev/null --max-time 3 "$HEALTH_URL"; then
	rm -f "$since_file"
	exit 0
fi
[[ -f $since_file ]] || echo "$now" >"$since_file"
since="$(<"$since_file")"
if ((now - since < UNHEALTHY_AFTER)); then
	exit 0
fi
echo "danmaku-health: the role has failed since $(date -u -d "@$since" +%FT%TZ); marking this machine unhealthy" >&2
export AWS_REGION="$REGION" AWS_RETRY_MODE=adaptive AWS_MAX_ATTEMPTS=5
aws autoscaling set-instance-health --instance-id "$INSTANCE_ID" --health-status Unhealthy --should-respect-grace-period
EOF
	chmod 0755 /usr/local/sbin/danmaku-health
	cat >/etc/systemd/system/danmaku-health.service <<'EOF'
[Unit]
Description=check the danmaku role's health

[Service]
Type=oneshot
ExecStart=/usr/local/sbin/danmaku-health
EOF
	cat >/etc/systemd/system/danmaku-health.timer <<'EOF'
[Unit]
Description=check the danmaku role's health every 10 s
# From the role's first start on: publishing the node's name before it
# may take minutes when a whole fleet boots at once.
After=danmaku.service

[Timer]
OnActiveSec=10s
OnUnitActiveSec=10s
AccuracySec=1s

[Install]
WantedBy=timers.target
EOF
	health_timer="danmaku-health.timer"
fi

systemctl daemon-reload
if [[ -n $tls_unit ]]; then
	# The first fetch before the role starts: without its certificate it
	# would refuse to start.
	systemctl start danmaku-tls.service
	systemctl enable --now danmaku-tls.timer
fi
if [[ -n $dns_unit ]]; then
	systemctl enable --now "$dns_unit"
fi
systemctl enable --now danmaku.service
if [[ -n $health_timer ]]; then
	systemctl enable --now "$health_timer"
fi
echo "danmaku-boot: $BOOT_ROLE started on $instance_id"
