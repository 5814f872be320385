#!/bin/bash
# Boot script of every danmaku machine (Amazon Linux 2023), run once as root
# by cloud-init. compute.tf prepends the BOOT_* settings of the machine's
# role to it and hands the result over as user data; nothing in it is
# secret.
#
# It installs the release binary, writes the role's configuration, gives an
# edge or ingest machine its public name (and TLS terminator), and starts
# the role under systemd. Secrets are fetched by danmaku-start each time the
# role starts and live only in the process's environment.
set -euo pipefail

: "${BOOT_ROLE:?}" "${BOOT_REGION:?}" "${BOOT_ENV_B64:?}" "${BOOT_ARGS_B64:?}"
: "${BOOT_RELEASE=}" "${BOOT_RELEASE_SHA256=}" "${BOOT_NODE_NAME_PREFIX=}" "${BOOT_NODE_DOMAIN=}"
: "${BOOT_ZONE_ID=}" "${BOOT_URL_ENV=}" "${BOOT_URL_SCHEME=}" "${BOOT_URL_PATH=}" "${BOOT_PUBLIC_PORT=}"
: "${BOOT_PORT:?}" "${BOOT_TLS_SECRET=}"

# Hundreds of machines boot at once before a show; adaptive retries spread
# their calls instead of failing on the first throttling answer (Route 53
# takes 5 changes a second per account).
export AWS_REGION="$BOOT_REGION" AWS_RETRY_MODE=adaptive AWS_MAX_ATTEMPTS=15

imds_token="$(curl -fsS -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 600' http://169.254.169.254/latest/api/token)"
imds() { curl -fsS -H "X-aws-ec2-metadata-token: $imds_token" "http://169.254.169.254/latest/meta-data/$1"; }
instance_id="$(imds instance-id)"

# --- kernel: room for 100,000 connections and their upstream twins --------
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

# --- configuration: no secret values in any of these files -----------------
install -d -m 0755 /etc/danmaku
# The role's environment file (the event's env_ROLE output): KEY='value'
# lines, and a "# secret NAME ARN" comment for each secret.
base64 -d <<<"$BOOT_ENV_B64" >/etc/danmaku/danmaku.env
echo "DANMAKU_NODE_ID='$instance_id'" >>/etc/danmaku/danmaku.env
# One command-line argument per line.
base64 -d <<<"$BOOT_ARGS_B64" >/etc/danmaku/args
{
	echo "ROLE=$BOOT_ROLE"
	echo "REGION=$BOOT_REGION"
} >/etc/danmaku/boot.env

# --- public name (edge, ingest) ---------------------------------------------
dns_unit=""
if [[ -n $BOOT_NODE_NAME_PREFIX ]]; then
	public_ip="$(imds public-ipv4)"
	node_name="$BOOT_NODE_NAME_PREFIX-${public_ip//./-}.$BOOT_NODE_DOMAIN"
	port_part=""
	if [[ $BOOT_PUBLIC_PORT != 443 ]]; then
		port_part=":$BOOT_PUBLIC_PORT"
	fi
	# Tokens are bound to this URL: it must be exactly what the gslb hands out.
	echo "$BOOT_URL_ENV='$BOOT_URL_SCHEME://$node_name$port_part$BOOT_URL_PATH'" >>/etc/danmaku/danmaku.env
	{
		echo "NODE_NAME=$node_name"
		echo "PUBLIC_IP=$public_ip"
		echo "ZONE_ID=$BOOT_ZONE_ID"
	} >>/etc/danmaku/boot.env

	cat >/usr/local/sbin/danmaku-dns <<'EOF'
#!/bin/bash
# danmaku-dns UPSERT|DELETE: publishes or withdraws this machine's name.
set -euo pipefail
. /etc/danmaku/boot.env
export AWS_REGION="$REGION" AWS_RETRY_MODE=adaptive AWS_MAX_ATTEMPTS=15
batch="$(printf '{"Changes":[{"Action":"%s","ResourceRecordSet":{"Name":"%s","Type":"A","TTL":60,"ResourceRecords":[{"Value":"%s"}]}}]}' "$1" "$NODE_NAME" "$PUBLIC_IP")"
change="$(aws route53 change-resource-record-sets --hosted-zone-id "$ZONE_ID" --change-batch "$batch" --query ChangeInfo.Id --output text)"
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

# --- TLS terminator (edge, ingest, when a certificate is configured) --------
# The role speaks plain HTTP; browsers on an https page may only use wss://
# and https://. nginx holds the certificate and forwards to the role over
# 127.0.0.1-4: one upstream address would cap the proxied connections at
# the ~64,000 source ports towards it.
if [[ -n $BOOT_TLS_SECRET ]]; then
	dnf install -y -q nginx
	install -d -m 0700 /etc/danmaku/tls
	(
		umask 077
		aws secretsmanager get-secret-value --secret-id "$BOOT_TLS_SECRET" \
			--query SecretString --output text >/etc/danmaku/tls/bundle.pem
	)
	cat >/etc/nginx/nginx.conf <<EOF
user nginx;
worker_processes auto;
worker_rlimit_nofile 1048576;
pid /run/nginx.pid;
error_log /var/log/nginx/error.log warn;

events {
    worker_connections 262144;
    multi_accept on;
}

http {
    access_log off;
    server_tokens off;
    # WebSocket upgrades pass through; other requests reuse upstream
    # connections (an empty Connection header keeps them alive).
    map \$http_upgrade \$connection_upgrade {
        default upgrade;
        ''      '';
    }
    upstream danmaku {
        server 127.0.0.1:$BOOT_PORT;
        server 127.0.0.2:$BOOT_PORT;
        server 127.0.0.3:$BOOT_PORT;
        server 127.0.0.4:$BOOT_PORT;
        keepalive 512;
    }
    server {
        listen 443 ssl reuseport backlog=65535;
        ssl_certificate     /etc/danmaku/tls/bundle.pem;
        ssl_certificate_key /etc/danmaku/tls/bundle.pem;
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_session_cache shared:danmaku:64m;
        ssl_session_timeout 4h;
        client_max_body_size 8k;
        # Metrics are for the operators' scraper (metrics_cidrs), not the
        # internet.
        location = /metrics {
            return 404;
        }
        location / {
            proxy_pass http://danmaku;
            proxy_http_version 1.1;
            proxy_set_header Host \$host;
            proxy_set_header X-Forwarded-For \$remote_addr;
            proxy_set_header X-Forwarded-Proto https;
            proxy_set_header Upgrade \$http_upgrade;
            proxy_set_header Connection \$connection_upgrade;
            proxy_buffering off;
            proxy_read_timeout 1h;
            proxy_send_timeout 1h;
        }
    }
}
EOF
	nginx -t -q
	systemctl enable --now nginx
fi

# --- the role -------------------------------------------------------------
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

cat >/etc/systemd/system/danmaku.service <<EOF
[Unit]
Description=danmaku $BOOT_ROLE
Wants=network-online.target $dns_unit
After=network-online.target $dns_unit
Requires=$dns_unit

[Service]
DynamicUser=yes
RuntimeDirectory=danmaku
Environment=HOME=/run/danmaku
EnvironmentFile=/etc/danmaku/danmaku.env
ExecStart=/usr/local/bin/danmaku-start
Restart=always
RestartSec=1
LimitNOFILE=1048576
# An edge drains its connections over 10 s on SIGTERM.
TimeoutStopSec=30
NoNewPrivileges=yes

[Install]
WantedBy=multi-user.target
EOF
systemctl daemon-reload
if [[ -n $dns_unit ]]; then
	systemctl enable --now "$dns_unit"
fi
systemctl enable --now danmaku.service
echo "danmaku-boot: $BOOT_ROLE started on $instance_id"
