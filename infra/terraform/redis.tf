# ElastiCache Redis in cluster mode: every key of a room carries the hash tag
# {room:ID}, so a room lives on one shard and the shards spread the rooms.
# Each role logs in as its own ACL user, danmaku-ROLE (DANMAKU_REDIS_USER
# and DANMAKU_REDIS_PASSWORD), whose password only that role can read. Each
# user's access string is local.redis_acl_access[ROLE] (redis_acl.tf): only
# the keys and commands that role's backends use, the table the stack's ACL
# test proves on a real Redis. No variable widens them: a role that needs
# more needs the table changed (and that test passing), not an override.
#
# Durability: ElastiCache has no appendfsync always. A write is acknowledged
# by the primary before it reaches a replica, so a primary's failure can
# lose the last acknowledged writes — gifts included (docs/operations.md,
# "Redis durability is the floor of no gift lost"). See README.md.

resource "aws_elasticache_subnet_group" "redis" {
  name       = local.name
  subnet_ids = aws_subnet.private[*].id
}

resource "aws_elasticache_parameter_group" "redis" {
  name   = "${local.name}-redis7-cluster"
  family = "redis7"

  parameter {
    name  = "cluster-enabled"
    value = "yes"
  }

  # ElastiCache's default evicts keys that have a TTL when memory runs out:
  # gift order records (the idempotency of the gift API), slicer leases and
  # the token epochs all have one. Better that a full Redis refuses writes,
  # which every role reports and retries, than silently forget them.
  parameter {
    name  = "maxmemory-policy"
    value = "noeviction"
  }
}

locals {
  # The ACL user of each role (-redis-user), as the code names them
  # (internal/redisx).
  redis_user_name = { for r in local.roles : r => "danmaku-${r}" }
}

# A user group must hold a user named "default", and every connection starts
# logged in as it: this one is off, so an unauthenticated client can do
# nothing.
resource "aws_elasticache_user" "default" {
  user_id       = "${local.name}-default"
  user_name     = "default"
  engine        = "REDIS"
  access_string = "off -@all"
  passwords     = [terraform_data.generated["redis-default"].output]
}

resource "aws_elasticache_user" "role" {
  for_each      = toset(local.roles)
  user_id       = "${local.name}-${each.key}"
  user_name     = local.redis_user_name[each.key]
  engine        = "REDIS"
  access_string = local.redis_acl_access[each.key]
  passwords     = [terraform_data.generated["redis-${each.key}"].output]
}

# The one group the cluster admits: the disabled "default" user, the roles'
# users and the operators' (danmaku-ops, redis_acl.tf).
resource "aws_elasticache_user_group" "redis" {
  user_group_id = local.name
  engine        = "REDIS"
  user_ids = concat(
    [aws_elasticache_user.default.user_id],
    [for r in local.roles : aws_elasticache_user.role[r].user_id],
    [aws_elasticache_user.ops.user_id],
  )
}

resource "aws_elasticache_replication_group" "redis" {
  replication_group_id = local.name
  description          = "danmaku ${var.event}: room streams, leases, buckets, token secrets"
  engine               = "redis"
  engine_version       = var.redis_engine_version
  node_type            = var.redis_node_type
  port                 = local.redis_port
  parameter_group_name = aws_elasticache_parameter_group.redis.name
  subnet_group_name    = aws_elasticache_subnet_group.redis.name
  security_group_ids   = [aws_security_group.redis.id]

  cluster_mode            = "enabled"
  num_node_groups         = var.redis_shards
  replicas_per_node_group = var.redis_replicas_per_shard

  automatic_failover_enabled = true
  multi_az_enabled           = true

  at_rest_encryption_enabled = true
  transit_encryption_enabled = true
  transit_encryption_mode    = "required"
  user_group_ids             = [aws_elasticache_user_group.redis.user_group_id]

  snapshot_retention_limit = var.redis_snapshot_retention_days
  # AWS's own patching happens in the operators' window, never at a random
  # hour, and the engine changes only when they change redis_engine_version.
  maintenance_window         = var.redis_maintenance_window
  auto_minor_version_upgrade = tostring(var.redis_auto_minor_version_upgrade)
  # A per-event stack is changed on purpose, between shows: apply now rather
  # than in a maintenance window that may fall in the middle of one.
  apply_immediately = true
}
