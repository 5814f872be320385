# What the roles' configuration is made of. No output holds a secret value:
# secrets are named by ARN. env_ROLE is the environment file the machines of
# that role boot with; env.sh prints it (and can fetch its secrets).

output "event" {
  description = "The event's name."
  value       = var.event
}

output "region" {
  description = "AWS region of the event's resources."
  value       = var.region
}

output "gslb_url" {
  description = "Base URL of the entry endpoint (GET /v1/entry) that apps and the SDK are configured with."
  value       = local.gslb_url
}

output "cdn_base_url" {
  description = "CDN base URL the gslb hands to clients (-cdn): a segment's URL is this plus its key."
  value       = local.cdn_base_url
}

output "cdn_distribution_id" {
  description = "CloudFront distribution id (for invalidations and metrics)."
  value       = aws_cloudfront_distribution.cdn.id
}

output "segments_bucket" {
  description = "Bucket the slicer writes segments to (DANMAKU_S3_BUCKET)."
  value       = module.segments_bucket.id
}

output "s3_prefix" {
  description = "Key prefix inside the bucket (DANMAKU_S3_PREFIX)."
  value       = var.s3_prefix
}

output "audit_bucket" {
  description = "Bucket of the audit trail (DANMAKU_AUDIT_S3_BUCKET of the ingest and the slicer): `danmaku audit -audit-s3-bucket` reads it."
  value       = module.audit_bucket.id
}

output "gslb_load_balancer_arns" {
  description = "ARNs of the gslb's load balancers: what a pre-show capacity reservation is requested for (docs/operations.md, \"Pre-show checklist\")."
  value       = aws_lb.gslb[*].arn
}

output "boot_user_data" {
  description = "The boot script each role's machines run (their launch template's user data, uncompressed): the BOOT_* and OBS_* settings, observability-boot.sh and node-boot.sh. No secret is in it."
  value       = local.user_data
}

output "node_capacity" {
  description = "What each edge and ingest reports to the gslb as its capacity: -max-conns (edge connections) and -ingest-capacity (in-flight requests), derived from the instance type unless set."
  value       = local.capacity
}

output "redis_configuration_endpoint" {
  description = "host:port a Redis Cluster client discovers every shard from."
  value       = "${aws_elasticache_replication_group.redis.configuration_endpoint_address}:${local.redis_port}"
}

output "redis_url" {
  description = "DANMAKU_REDIS: TLS URL of the configuration endpoint, without credentials."
  value       = local.redis_url
}

output "redis_users" {
  description = "Redis ACL user of each role (DANMAKU_REDIS_USER), and ops: the operators' user (password: redis_ops_password_secret_arn)."
  value       = merge({ for r in local.roles : r => aws_elasticache_user.role[r].user_name }, { ops = aws_elasticache_user.ops.user_name })
}

output "secret_arns" {
  description = "ARN of every secret the roles read, by name (master-key, ticket-key, operator-keys, gift-keys, announce-keys, redis-ROLE). Business servers read gift-keys (and announce-keys); operators read operator-keys."
  value       = local.secret_arn
}

output "role_env" {
  description = "Non-secret environment of each role. Each machine adds DANMAKU_NODE_ID and, for edge and ingest, its public URL (DANMAKU_EDGE_URL, DANMAKU_INGEST_URL)."
  value       = local.role_env
}

output "role_secret_env" {
  description = "Secret environment of each role: variable name => Secrets Manager ARN holding its value."
  value       = local.role_secret_env
}

output "role_args" {
  description = "Command-line flags of each role (settings that have no environment variable)."
  value       = local.role_args
}

output "node_domain" {
  description = "Domain the edge and ingest machines publish their names under."
  value       = local.node_domain
}

output "autoscaling_groups" {
  description = "Auto scaling group of each role."
  value       = { for r in local.roles : r => aws_autoscaling_group.role[r].name }
}

output "env_gslb" {
  description = "Environment file of the gslb (KEY='value' lines; secrets as \"# secret NAME ARN\" comments): env.sh STATE gslb."
  value       = local.env_file.gslb
}

output "env_ingest" {
  description = "Environment file of the ingest: env.sh STATE ingest."
  value       = local.env_file.ingest
}

output "env_edge" {
  description = "Environment file of the edge: env.sh STATE edge."
  value       = local.env_file.edge
}

output "env_slicer" {
  description = "Environment file of the slicer: env.sh STATE slicer."
  value       = local.env_file.slicer
}
