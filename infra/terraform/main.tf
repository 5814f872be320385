# danmaku for one event, applied once per event with a state of its own.
# README.md says what each file creates and why.

data "aws_caller_identity" "this" {}

data "aws_partition" "this" {}

locals {
  name      = "danmaku-${var.event}"
  partition = data.aws_partition.this.partition

  roles = ["gslb", "ingest", "edge", "slicer"]

  # The roles' default listen ports (internal/stack); each role also serves
  # /healthz and /metrics there.
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
  # e-203-0-113-7.nodes.DOMAIN: derived from the machine's public address, so
  # a machine needs no coordination to pick a name no other machine holds.
  node_name_prefix = { ingest = "i", edge = "e" }
  node_tls         = var.node_tls_secret_arn != null
  # The port clients reach a public role on: 443 behind the machine's TLS
  # terminator, else the role's own port.
  public_port = { for r in local.public_roles : r => local.node_tls ? 443 : local.port[r] }
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
  role_env = {
    for r in local.roles : r => merge(
      local.common_env,
      { DANMAKU_REDIS_USER = aws_elasticache_user.role[r].user_name },
      # Only the slicer touches the bucket: the other roles get no S3
      # setting and no S3 permission.
      r != "slicer" ? {} : {
        DANMAKU_S3_BUCKET = module.segments_bucket.id
        DANMAKU_S3_REGION = var.region
        DANMAKU_S3_PREFIX = var.s3_prefix
      },
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
        "# Per machine: DANMAKU_NODE_ID${contains(local.public_roles, r) ? " and ${local.node_url[r].env}" : ""}.",
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
  role_args = {
    # 0.0.0.0 rather than 127.0.0.1 for the public roles: their TLS
    # terminator spreads its upstream connections over 127.0.0.1-4 so that
    # 100,000 of them do not run out of source ports towards one address.
    # The security groups keep the role ports closed to the internet.
    gslb   = concat(["-gslb", "0.0.0.0:${local.port.gslb}", "-cdn", local.cdn_base_url], local.common_args)
    ingest = concat(["-ingest", "0.0.0.0:${local.port.ingest}"], local.common_args)
    edge   = concat(["-edge", "0.0.0.0:${local.port.edge}", "-min-gift-value", tostring(var.min_gift_value)], local.common_args)
    slicer = concat(["-slicer", "0.0.0.0:${local.port.slicer}"], local.common_args)
  }
}
