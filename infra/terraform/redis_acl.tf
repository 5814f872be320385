# Least privilege in Redis: one ElastiCache user per role, danmaku-ROLE
# (aws_elasticache_user.role, redis.tf), and the operators' danmaku-ops
# (below), each allowed only the keys and commands it uses — an edge cannot
# write the token keys, the rate-limit rules, the events or the bans
# (docs/operations.md, "Redis users"). The access strings below are the
# table in internal/redisx/acl.go; TestTerraformACL (go test
# ./internal/redisx) fails when they differ and rewrites them with -update.
# Redis 7 syntax: %R~ (read-only) and %W~ (write-only) key patterns, which
# the local tests prove on Redis 7; that ElastiCache's user API accepts them
# in an access string cannot be checked without an AWS account (README.md).
#
# Passwords: each server role's is its existing redis-ROLE secret
# (secrets.tf, DANMAKU_REDIS_PASSWORD of that role's machines only); the
# operators' user, which no machine runs as, has a secret of its own here.

locals {
  # BEGIN redis_acl: internal/redisx/acl.go, ElastiCache access strings
  redis_acl_access = {
    edge   = "on %R~danmaku:{auth}:* %R~danmaku:events %W~danmaku:{load:*}:* %W~danmaku:{online:*} %R~danmaku:{room:*}:live ~danmaku:{rl:*}:w %R~danmaku:ratelimit:rules %R~danmaku:{bans}:* %R~danmaku:{rules}:* -@all +ping +cluster|slots +command +asking +evalsha +eval +mget +hgetall +multi +exec +hset +hdel +xadd +xread +xrevrange +xinfo|stream +time +zremrangebyscore +zcard +zadd +pexpire +zrange +get +evalsha_ro +eval_ro +hget +hmget"
    gslb   = "on ~danmaku:{auth}:* ~danmaku:events ~danmaku:{load:*}:* %W~danmaku:{online:*} ~danmaku:{rl:*}:w %R~danmaku:ratelimit:rules %R~danmaku:{bans}:* %R~danmaku:{rules}:* -@all +ping +cluster|slots +command +asking +evalsha +eval +set +mget +hmget +hsetnx +hexists +hset +hget +hgetall +hdel +xrevrange +xrange +xadd +zremrangebyscore +zcard +zadd +pexpire +zrange +get +time +evalsha_ro +eval_ro"
    ingest = "on %R~danmaku:{auth}:* %R~danmaku:events ~danmaku:{load:*}:* %R~danmaku:{online:*} ~danmaku:rooms ~danmaku:{room:*}:barrage ~danmaku:{room:*}:live ~danmaku:{room:*}:bucket ~danmaku:{room:*}:batch:* ~danmaku:{room:*}:fastlane ~danmaku:{room:*}:order:* ~danmaku:{room:*}:orderterms:* ~danmaku:{order:*}:room ~danmaku:{room:*}:giftbacklog ~danmaku:{room:*}:lottery:* ~danmaku:{lotteries}:* ~danmaku:{bans}:* ~danmaku:{event:*}:global ~danmaku:{room:*}:report* ~danmaku:{rl:*}:w %R~danmaku:ratelimit:rules ~danmaku:{rules}:* ~danmaku:{room:*}:takedowns -@all +ping +cluster|slots +command +asking +evalsha +eval +mget +hgetall +multi +exec +hset +hdel +xadd +xrevrange +xrange +xread +xinfo|stream +hsetnx +time +get +set +hmget +pexpire +wait +info|replication +hget +hscan +incr +zadd +zrem +zrangebyscore +sadd +scard +sscan +pexpireat +zscore +zcard +zpopmin +del +sismember +zincrby +zrevrange +exists +lpush +ltrim +lrange +pexpiretime +evalsha_ro +eval_ro +zremrangebyscore +zrange +hlen +hincrby"
    ops    = "on ~danmaku:ratelimit:rules %R~danmaku:* -@all +ping +cluster|slots +command +asking +set +get +mget +strlen +exists +type +ttl +pttl +hget +hgetall +hlen +scard +sscan +zcard +zrange +xlen +xrange +xrevrange +xinfo|stream +xinfo|groups +xpending"
    slicer = "on %R~danmaku:events ~danmaku:rooms ~danmaku:{room:*}:barrage ~danmaku:{room:*}:live ~danmaku:{room:*}:leader ~danmaku:{room:*}:giftbacklog ~danmaku:slicer:settings -@all +ping +cluster|slots +command +asking +evalsha +eval +hgetall +hdel +xreadgroup +xgroup|create +xgroup|destroy +xautoclaim +xack +xpending +xtrim +del +pexpire +time +get +set"
  }
  # END redis_acl
}

# The operators' user, which no machine runs as: the rate-limit rules
# document, and reads for diagnosis. The roles' users are in redis.tf; all
# of them are in the cluster's one user group there.
resource "aws_elasticache_user" "ops" {
  user_id       = "${local.name}-ops"
  user_name     = "danmaku-ops"
  engine        = "REDIS"
  access_string = local.redis_acl_access["ops"]
  passwords     = [terraform_data.redis_ops_password.output]
}

# The operators' password (danmaku-ops: the rate-limit rules document,
# reads for diagnosis), drawn and kept as secrets.tf draws the roles'.
data "aws_secretsmanager_random_password" "redis_ops" {
  password_length     = 48
  exclude_punctuation = true
}

resource "terraform_data" "redis_ops_password" {
  input            = sensitive(data.aws_secretsmanager_random_password.redis_ops.random_password)
  triggers_replace = [var.secret_generation]
  lifecycle {
    ignore_changes = [input]
  }
}

resource "aws_secretsmanager_secret" "redis_ops" {
  name                    = "danmaku/${var.event}/redis-ops"
  description             = "Password of the Redis user danmaku-ops (operators: rate-limit rules, diagnosis) for danmaku event ${var.event}"
  recovery_window_in_days = var.secret_recovery_days
}

resource "aws_secretsmanager_secret_version" "redis_ops" {
  secret_id     = aws_secretsmanager_secret.redis_ops.id
  secret_string = terraform_data.redis_ops_password.output
}

output "redis_ops_password_secret_arn" {
  description = "Secrets Manager secret holding danmaku-ops's password, for operators."
  value       = aws_secretsmanager_secret.redis_ops.arn
}
