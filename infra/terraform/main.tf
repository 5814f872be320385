# danmaku for one event, applied once per event with a state of its own.
# README.md says what each file creates and why.

data "aws_caller_identity" "this" {}

data "aws_partition" "this" {}

locals {
  name      = "danmaku-${var.event}"
  partition = data.aws_partition.this.partition
  account   = data.aws_caller_identity.this.account_id

  roles = ["gslb", "ingest", "edge", "slicer"]

  # Load balancers and target groups take 32 characters: "danmaku-EVENT-gslb"
  # does not fit an event of 20. Such a name keeps its first characters and
  # ends in a hash of the whole, so two events never share one.
  lb_names = [for i in range(var.gslb_load_balancers) : (
    length("${local.name}-gslb${i == 0 ? "" : i + 1}") <= 32
    ? "${local.name}-gslb${i == 0 ? "" : i + 1}"
    : "${trimsuffix(substr(local.name, 0, 21), "-")}-${substr(sha256(local.name), 0, 4)}-gslb${i == 0 ? "" : i + 1}"
  )]

  # The roles' default listen ports (internal/stack); each role also serves
  # /healthz there, and the gslb and the slicer /metrics.
  port = { gslb = 7700, ingest = 7701, edge = 7702, slicer = 7704 }

  fleet = {
    gslb   = var.gslb_fleet
    ingest = var.ingest_fleet
    edge   = var.edge_fleet
    slicer = var.slicer_fleet
  }

  # The gslb hands clients the addresses of individual ingest and edge
  # machines, so those two need addresses of their own on the internet; it is
  # their load balancer.
  public_roles = ["ingest", "edge"]

  node_domain = "nodes.${var.domain}"
  # e-i-0123456789abcdef0.nodes.DOMAIN: the machine's instance id, so a
  # machine needs no coordination to pick a name no other holds, and a
  # record names the machine it belongs to — what node_records.tf deletes
  # when that machine goes, whatever its address was.
  node_name_prefix = { ingest = "i", edge = "e" }
  node_tls         = var.node_tls_secret_arn != null
  # With a certificate the roles serve TLS themselves on 443 (no proxy in
  # between: a client's address is the socket's peer); without, plain on
  # their own port.
  public_port = { for r in local.public_roles : r => local.node_tls ? 443 : local.port[r] }
  listen_port = merge(local.port, local.public_port)
  # The public roles serve /metrics on a port of their own (-metrics-addr),
  # their role's port + 10, never on the port clients reach (404 there);
  # only the scrapers' ranges reach it (network.tf). metrics_port: where
  # each role's /metrics is.
  public_metrics_port = { for r in local.public_roles : r => local.port[r] + 10 }
  metrics_port        = merge(local.port, local.public_metrics_port)
  # Where the boot script writes the certificate and key it fetches,
  # readable by the role's user only.
  tls_files = { cert = "/etc/danmaku/tls/cert.pem", key = "/etc/danmaku/tls/key.pem" }
  # The variable each public role announces its address in, and how that
  # address is built (scheme, path).
  node_url = {
    ingest = { env = "DANMAKU_INGEST_URL", scheme = local.node_tls ? "https" : "http", path = "" }
    edge   = { env = "DANMAKU_EDGE_URL", scheme = local.node_tls ? "wss" : "ws", path = "/v1/ws" }
  }

  gslb_host    = "gslb.${var.domain}"
  gslb_url     = "https://${local.gslb_host}"
  cdn_host     = var.cdn_certificate_arn != null ? "cdn.${var.domain}" : aws_cloudfront_distribution.cdn.domain_name
  cdn_base_url = "https://${local.cdn_host}/${var.s3_prefix}"

  # The subnets the gslb's load balancers stand in (network.tf): the only
  # hops whose X-Forwarded-For the gslb believes. Nothing else in them can
  # reach the gslb's port (the security group admits the load balancers
  # only).
  public_subnet_cidrs = [for i in range(length(var.availability_zones)) : cidrsubnet(var.vpc_cidr, 4, i)]

  redis_port = 6379
  # rediss: ElastiCache requires TLS (transit encryption). The configuration
  # endpoint is the seed a Cluster client discovers every shard from.
  redis_url = "rediss://${aws_elasticache_replication_group.redis.configuration_endpoint_address}:${local.redis_port}"

  # Non-secret configuration of each role, as environment variables
  # (cmd/danmaku/serve.go). Per-machine values (DANMAKU_NODE_ID and the
  # public URL) are added by the machine at boot; secrets come from
  # local.role_secret_env.
  common_env = {
    DANMAKU_REDIS         = local.redis_url
    DANMAKU_REDIS_CLUSTER = "true" # the URL is one seed: the configuration endpoint
    # An answered gift must survive its shard's primary failing over: wait
    # for one replica (the default of two per shard leaves one to spare).
    DANMAKU_GIFT_WAIT_REPLICAS = var.redis_replicas_per_shard > 0 ? "1" : "0"
    DANMAKU_CORS_ORIGINS       = join(",", var.cors_origins)
  }
  # The audit trail of ingest and slicer: the event's audit bucket (audit.tf),
  # in the region the S3 client signs for, kept as long as its lifecycle
  # rule keeps it.
  audit_env = {
    DANMAKU_AUDIT_S3_BUCKET = module.audit_bucket.id
    DANMAKU_AUDIT_RETENTION = "${var.audit_retention_days * 24}h"
    DANMAKU_S3_REGION       = var.region
  }
  role_env = {
    for r in local.roles : r => merge(
      local.common_env,
      { DANMAKU_REDIS_USER = local.redis_user_name[r] },
      r != "gslb" ? {} : {
        DANMAKU_TRUSTED_PROXIES = join(",", local.public_subnet_cidrs)
        # The gslb's shared-window rate limits: each process admits its
        # share while Redis is unreachable.
        DANMAKU_GSLB_NODES = tostring(var.gslb_fleet.count)
      },
      r != "edge" ? {} : { DANMAKU_MAX_CONNS = tostring(local.capacity.edge_max_conns) },
      r != "ingest" ? {} : merge(local.audit_env, { DANMAKU_INGEST_CAPACITY = tostring(local.capacity.ingest_capacity) }),
      # The slicer alone touches the segments bucket; it and the ingest
      # write the audit trail.
      r != "slicer" ? {} : merge(local.audit_env, {
        DANMAKU_S3_BUCKET = module.segments_bucket.id
        DANMAKU_S3_PREFIX = var.s3_prefix
      }),
    )
  }

  # The environment file of each role, in the one format both the machines
  # (a systemd EnvironmentFile) and env.sh (a shell file) read: KEY='value'
  # lines, and one "# secret NAME ARN" comment per secret, which the role's
  # start script (or env.sh --secrets) fetches. systemd and the shell agree
  # on single quotes only for values without one, which the variables'
  # validations guarantee.
  env_file = {
    for r in local.roles : r => join("\n", concat(
      [
        "# danmaku ${r} of event ${var.event}, from the event's Terraform outputs (infra/terraform/env.sh).",
        "# Per machine: DANMAKU_NODE_ID${contains(local.public_roles, r) ? " and ${local.node_url[r].env}" : ""}${contains(local.public_roles, r) && local.node_tls ? "; the certificate and key files the flags name" : ""}.",
        "# Flags: danmaku ${r} ${join(" ", local.role_args[r])}",
      ],
      [for k in sort(keys(local.role_env[r])) : "${k}='${local.role_env[r][k]}'"],
      [for k in sort(keys(local.role_secret_env[r])) : "# secret ${k} ${local.role_secret_env[r][k]}"],
      [""],
    ))
  }

  # Settings that exist only as flags; none of them is secret.
  common_args = concat(
    ["-log-json", "-log-level", var.log_level, "-segment-ms", tostring(var.default_segment_ms)],
    var.budget == null ? [] : ["-budget", tostring(var.budget)],
  )
  tls_args = {
    for r in local.public_roles : r => local.node_tls ? ["-${r}-tls-cert", local.tls_files.cert, "-${r}-tls-key", local.tls_files.key] : []
  }
  role_args = {
    # Every role listens on all addresses: the public roles for their
    # clients, the others for the load balancer (gslb) and the scrapers;
    # the security groups decide who reaches which port.
    gslb   = concat(["-gslb", "0.0.0.0:${local.port.gslb}", "-cdn", local.cdn_base_url], local.common_args)
    ingest = concat(["-ingest", "0.0.0.0:${local.listen_port.ingest}", "-metrics-addr", "0.0.0.0:${local.public_metrics_port.ingest}"], local.tls_args.ingest, local.common_args)
    edge   = concat(["-edge", "0.0.0.0:${local.listen_port.edge}", "-metrics-addr", "0.0.0.0:${local.public_metrics_port.edge}", "-min-gift-value", tostring(var.min_gift_value)], local.tls_args.edge, local.common_args)
    slicer = concat(["-slicer", "0.0.0.0:${local.port.slicer}"], local.common_args)
  }
}
