# The four roles' machines: least-privilege instance roles, secrets each role
# alone reads, public addresses for edge and ingest, and the configuration
# the boot script hands the roles.

mock_provider "aws" {
  source = "./tests/mocks"
}

# The mock would give both buckets one ARN.
override_resource {
  target = module.audit_bucket.aws_s3_bucket.this
  values = {
    arn = "arn:aws:s3:::danmaku-test-audit-123456789012"
  }
}

variables {
  event                    = "test"
  region                   = "us-east-1"
  availability_zones       = ["us-east-1a", "us-east-1b", "us-east-1c"]
  domain                   = "test.live.example.com"
  dns_zone_id              = "Z0123456789EXAMPLE"
  gslb_certificate_arn     = "arn:aws:acm:us-east-1:123456789012:certificate/00000000-0000-0000-0000-000000000001"
  ticket_key_secret_arn    = "arn:aws:secretsmanager:us-east-1:123456789012:secret:login/ticket-key-AbCdEf"
  node_tls_secret_arn      = "arn:aws:secretsmanager:us-east-1:123456789012:secret:danmaku/nodes-tls-AbCdEf"
  release_s3_uri           = "s3://artifacts-example/danmaku/v1/danmaku-linux-amd64"
  ami_id                   = "ami-0123456789abcdef0"
  redis_maintenance_window = "sun:18:00-sun:19:00"
  cors_origins             = ["https://app.example.com", "https://www.example.com"]
  gslb_fleet               = { instance_type = "c7i.large", count = 2 }
  ingest_fleet             = { instance_type = "c6in.large", count = 3 }
  edge_fleet               = { instance_type = "c6in.large", count = 4, max_count = 6 }
}

run "machines" {
  command = apply

  variables {
    redis_shards = 4
  }

  # --- the slicer and the bucket ---------------------------------------------
  assert {
    condition     = toset(flatten([for s in jsondecode(aws_iam_role_policy.role["slicer"].policy).Statement : s.Action if startswith(jsonencode(s.Resource), "\"${module.segments_bucket.arn}")])) == toset(["s3:GetObject", "s3:PutObject", "s3:ListBucket"])
    error_message = "The slicer's actions on the segments bucket are GetObject, PutObject and ListBucket: no delete, no wildcard."
  }
  assert {
    condition = [for s in jsondecode(aws_iam_role_policy.role["slicer"].policy).Statement : s.Resource if contains(flatten([s.Action]), "s3:PutObject")] == [
      "${module.segments_bucket.arn}/rooms/*",
      "${module.audit_bucket.arn}/audit/*",
    ]
    error_message = "The slicer writes under rooms/ of the event's bucket and audit/ of its audit bucket only."
  }
  assert {
    condition = alltrue(flatten([for r in ["gslb", "ingest", "edge", "slicer"] : [
      for s in jsondecode(aws_iam_role_policy.role[r].policy).Statement : [
        for res in flatten([s.Resource]) : contains([
          "${module.segments_bucket.arn}/rooms/*",
          module.segments_bucket.arn,
          "${module.audit_bucket.arn}/audit/*",
          module.audit_bucket.arn,
          "arn:aws:s3:::artifacts-example/danmaku/v1/danmaku-linux-amd64",
        ], res) if startswith(res, "arn:aws:s3:")
      ]
    ]]))
    error_message = "No role may touch any S3 resource but the event's buckets (slicer, ingest) and the one release object: no wildcard bucket."
  }
  assert {
    condition = alltrue([for r in ["gslb", "ingest", "edge"] : alltrue([
      for s in jsondecode(aws_iam_role_policy.role[r].policy).Statement :
      !strcontains(jsonencode(s.Resource), module.segments_bucket.arn) if anytrue([for a in flatten([s.Action]) : startswith(a, "s3:")])
    ])])
    error_message = "Only the slicer may touch the segments bucket."
  }
  assert {
    condition = alltrue([for r in ["gslb", "ingest", "edge", "slicer"] : alltrue([
      for s in jsondecode(aws_iam_role_policy.role[r].policy).Statement : alltrue([
        for a in flatten([s.Action]) :
        !strcontains(a, "*") && (!strcontains(a, "Delete") || (a == "s3:DeleteObject" && s.Resource == "${module.audit_bucket.arn}/audit/*"))
      ])
    ])])
    error_message = "No role has a wildcard action, and the one delete is of audit objects past their retention."
  }

  # --- secrets: each role reads its own ------------------------------------
  assert {
    condition = {
      for r in ["gslb", "ingest", "edge", "slicer"] : r => toset(flatten([
        for s in jsondecode(aws_iam_role_policy.role[r].policy).Statement : s.Resource if s.Action == "secretsmanager:GetSecretValue"
      ]))
      } == {
      gslb   = toset([output.secret_arns["master-key"], var.ticket_key_secret_arn, output.secret_arns["operator-keys"], output.secret_arns["redis-gslb"]])
      ingest = toset([output.secret_arns["gift-keys"], output.secret_arns["announce-keys"], output.secret_arns["operator-keys"], output.secret_arns["redis-ingest"], var.node_tls_secret_arn])
      edge   = toset([output.secret_arns["redis-edge"], var.node_tls_secret_arn])
      slicer = toset([output.secret_arns["operator-keys"], output.secret_arns["redis-slicer"]])
    }
    error_message = "Each role may read exactly the secrets it uses: the master and ticket keys the gslb alone; the operator keys the gslb (events), the ingest (bans, broadcasts, lotteries) and the slicer (settings)."
  }
  assert {
    condition = output.role_secret_env == {
      gslb = {
        DANMAKU_MASTER_KEY     = output.secret_arns["master-key"]
        DANMAKU_TICKET_KEY     = var.ticket_key_secret_arn
        DANMAKU_OPERATOR_KEYS  = output.secret_arns["operator-keys"]
        DANMAKU_REDIS_PASSWORD = output.secret_arns["redis-gslb"]
      }
      ingest = {
        DANMAKU_GIFT_KEYS      = output.secret_arns["gift-keys"]
        DANMAKU_ANNOUNCE_KEYS  = output.secret_arns["announce-keys"]
        DANMAKU_OPERATOR_KEYS  = output.secret_arns["operator-keys"]
        DANMAKU_REDIS_PASSWORD = output.secret_arns["redis-ingest"]
      }
      edge = {
        DANMAKU_REDIS_PASSWORD = output.secret_arns["redis-edge"]
      }
      slicer = {
        DANMAKU_OPERATOR_KEYS  = output.secret_arns["operator-keys"]
        DANMAKU_REDIS_PASSWORD = output.secret_arns["redis-slicer"]
      }
    }
    error_message = "The secret environment of each role is what cmd/danmaku reads for it."
  }
  assert {
    condition     = alltrue([for r in ["gslb", "ingest", "edge", "slicer"] : !strcontains(output.boot_user_data[r], "MockGeneratedSecretValue")])
    error_message = "No secret value is in any user data."
  }

  # --- public addresses and names -------------------------------------------
  assert {
    condition     = alltrue([for r in ["edge", "ingest"] : one(aws_launch_template.role[r].network_interfaces).associate_public_ip_address == "true"])
    error_message = "Edge and ingest machines have public addresses: clients connect to them directly."
  }
  assert {
    condition = alltrue([
      strcontains(output.boot_user_data["edge"], "BOOT_URL_ENV='DANMAKU_EDGE_URL'"),
      strcontains(output.boot_user_data["edge"], "BOOT_URL_SCHEME='wss'"),
      strcontains(output.boot_user_data["edge"], "BOOT_NODE_DOMAIN='nodes.test.live.example.com'"),
      strcontains(output.boot_user_data["ingest"], "BOOT_URL_ENV='DANMAKU_INGEST_URL'"),
      strcontains(output.boot_user_data["ingest"], "BOOT_URL_SCHEME='https'"),
      !strcontains(output.boot_user_data["slicer"], "BOOT_NODE_NAME_PREFIX='"),
    ])
    error_message = "Edge and ingest machines announce wss:// and https:// URLs under nodes.DOMAIN; the slicer none."
  }
  assert {
    condition = [for s in jsondecode(aws_iam_role_policy.role["edge"].policy).Statement :
      s.Condition["ForAllValues:StringLike"]["route53:ChangeResourceRecordSetsNormalizedRecordNames"] if s.Sid == "PublishOwnNodeName"
    ] == [["e-*.nodes.test.live.example.com"]]
    error_message = "An edge may publish e-*.nodes.DOMAIN names only."
  }
  assert {
    condition     = alltrue([for r in ["gslb", "slicer"] : !strcontains(aws_iam_role_policy.role[r].policy, "route53")])
    error_message = "The gslb and the slicer publish no DNS name."
  }
  assert {
    condition     = aws_vpc_security_group_ingress_rule.public_role["edge"].from_port == 443 && aws_vpc_security_group_ingress_rule.public_role["ingest"].from_port == 443 && aws_vpc_security_group_ingress_rule.public_role["edge"].cidr_ipv4 == "0.0.0.0/0"
    error_message = "With TLS, edges and ingest nodes are reached on 443 from anywhere."
  }

  # --- fleets ----------------------------------------------------------------
  assert {
    condition = (
      aws_autoscaling_group.role["slicer"].min_size >= 2 &&
      aws_autoscaling_group.role["edge"].min_size == 4 && aws_autoscaling_group.role["edge"].max_size == 6 &&
      aws_autoscaling_group.role["ingest"].desired_capacity == 3 &&
      contains(aws_autoscaling_group.role["edge"].suspended_processes, "AZRebalance")
    )
    error_message = "Fleets are held at their size, the slicer at two or more; edges are never rebalanced away."
  }
  assert {
    condition = (
      aws_autoscaling_group.role["gslb"].target_group_arns == toset([aws_lb_target_group.gslb[0].arn]) &&
      aws_autoscaling_group.role["gslb"].health_check_type == "ELB" &&
      aws_lb_listener.gslb_https[0].protocol == "HTTPS" &&
      aws_lb_listener.gslb_https[0].certificate_arn == var.gslb_certificate_arn &&
      output.gslb_url == "https://gslb.test.live.example.com"
    )
    error_message = "The gslb sits behind the load balancer's HTTPS listener."
  }

  # --- configuration ---------------------------------------------------------
  assert {
    condition = alltrue([for r in ["gslb", "ingest", "edge", "slicer"] :
      startswith(output.role_env[r].DANMAKU_REDIS, "rediss://clustercfg.") &&
      output.role_env[r].DANMAKU_REDIS_USER == "danmaku-${r}" &&
      output.role_env[r].DANMAKU_CORS_ORIGINS == "https://app.example.com,https://www.example.com" &&
      contains(keys(output.role_env[r]), "DANMAKU_S3_BUCKET") == (r == "slicer")
    ])
    error_message = "Every role gets Redis over TLS as its own user and the CORS origins; the slicer alone the bucket."
  }
  assert {
    condition     = output.role_env.slicer.DANMAKU_S3_BUCKET == module.segments_bucket.id && output.role_env.slicer.DANMAKU_S3_REGION == "us-east-1" && output.role_env.slicer.DANMAKU_S3_PREFIX == ""
    error_message = "The slicer writes to the event's bucket."
  }
  assert {
    condition     = join(" ", output.role_args.gslb) == "-gslb 0.0.0.0:7700 -cdn ${output.cdn_base_url} -log-json -log-level info -segment-ms 1000"
    error_message = "The gslb hands out the CDN base URL."
  }
  assert {
    condition = output.env_edge == join("\n", [
      "# danmaku edge of event test, from the event's Terraform outputs (infra/terraform/env.sh).",
      "# Per machine: DANMAKU_NODE_ID and DANMAKU_EDGE_URL; the certificate and key files the flags name.",
      "# Flags: danmaku edge -edge 0.0.0.0:443 -metrics-addr 0.0.0.0:7712 -min-gift-value 0 -edge-tls-cert /etc/danmaku/tls/cert.pem -edge-tls-key /etc/danmaku/tls/key.pem -log-json -log-level info -segment-ms 1000",
      "DANMAKU_CORS_ORIGINS='https://app.example.com,https://www.example.com'",
      "DANMAKU_GIFT_WAIT_REPLICAS='1'",
      "DANMAKU_MAX_CONNS='35000'",
      "DANMAKU_REDIS='rediss://clustercfg.danmaku-test.abc123.use1.cache.amazonaws.com:6379'",
      "DANMAKU_REDIS_CLUSTER='true'",
      "DANMAKU_REDIS_USER='danmaku-edge'",
      "# secret DANMAKU_REDIS_PASSWORD ${output.secret_arns["redis-edge"]}",
      "",
    ])
    error_message = "The edge's environment file: its settings, and its one secret by ARN."
  }
  assert {
    condition = alltrue([for r, env in { gslb = output.env_gslb, ingest = output.env_ingest, edge = output.env_edge, slicer = output.env_slicer } :
      strcontains(output.boot_user_data[r], "BOOT_ENV_B64='${base64encode(env)}'")
    ])
    error_message = "Machines boot with exactly the environment file env.sh prints."
  }

  # --- Redis ------------------------------------------------------------------
  assert {
    condition = (
      aws_elasticache_replication_group.redis.cluster_mode == "enabled" &&
      aws_elasticache_replication_group.redis.num_node_groups == 4 &&
      aws_elasticache_replication_group.redis.replicas_per_node_group == 2 &&
      aws_elasticache_replication_group.redis.automatic_failover_enabled &&
      aws_elasticache_replication_group.redis.multi_az_enabled
    )
    error_message = "Redis runs in cluster mode, sharded as configured, with automatic failover across zones."
  }
  assert {
    condition = (
      aws_elasticache_replication_group.redis.transit_encryption_enabled &&
      aws_elasticache_replication_group.redis.transit_encryption_mode == "required" &&
      aws_elasticache_replication_group.redis.at_rest_encryption_enabled
    )
    error_message = "Redis encrypts in transit (required) and at rest."
  }
  assert {
    condition = {
      for p in aws_elasticache_parameter_group.redis.parameter : p.name => p.value
    } == { "cluster-enabled" = "yes", "maxmemory-policy" = "noeviction" }
    error_message = "Cluster mode on, and nothing evicted: gift order records and leases have TTLs."
  }
  assert {
    condition = (
      { for r, u in aws_elasticache_user.role : r => u.user_name } == { gslb = "danmaku-gslb", ingest = "danmaku-ingest", edge = "danmaku-edge", slicer = "danmaku-slicer" } &&
      alltrue([for r, u in aws_elasticache_user.role : u.access_string == local.redis_acl_access[r]]) &&
      aws_elasticache_user.ops.user_name == "danmaku-ops" && aws_elasticache_user.ops.access_string == local.redis_acl_access["ops"] &&
      aws_elasticache_user.default.user_name == "default" && startswith(aws_elasticache_user.default.access_string, "off") &&
      aws_elasticache_user_group.redis.user_ids == toset(concat(
        [aws_elasticache_user.default.user_id, aws_elasticache_user.ops.user_id],
        [for u in aws_elasticache_user.role : u.user_id],
      )) &&
      aws_elasticache_replication_group.redis.user_group_ids == toset([aws_elasticache_user_group.redis.user_group_id]) &&
      output.redis_users == { gslb = "danmaku-gslb", ingest = "danmaku-ingest", edge = "danmaku-edge", slicer = "danmaku-slicer", ops = "danmaku-ops" }
    )
    error_message = "One ACL user per role with the table's access string (redis_acl.tf), the operators' user, all in the cluster's one group; the default user is off."
  }
  assert {
    # Least privilege, not just the project's prefix: every user starts from
    # no command (-@all) and is granted commands one by one, never a
    # category or every key.
    condition = alltrue([for u in concat(values(aws_elasticache_user.role), [aws_elasticache_user.ops]) :
      startswith(u.access_string, "on ") && contains(split(" ", u.access_string), "-@all") &&
      length([for t in split(" ", u.access_string) : t if startswith(t, "+@") || contains(["~*", "%RW~*", "%W~*", "allkeys", "~danmaku:*", "%RW~danmaku:*", "%W~danmaku:*", "+@all"], t)]) == 0
    ])
    error_message = "No Redis user is granted a command category or every key."
  }
  assert {
    # The edge reads the token keys (it verifies tokens) and can write none:
    # its only pattern that covers danmaku:{auth}:* is %R~ (read-only). Each
    # write-capable pattern (~, %W~, %RW~) is turned into a regex and tried on
    # token keys.
    condition = (
      contains(split(" ", aws_elasticache_user.role["edge"].access_string), "%R~danmaku:{auth}:*") &&
      !contains(split(" ", aws_elasticache_user.role["edge"].access_string), "allkeys") &&
      alltrue(flatten([for t in split(" ", aws_elasticache_user.role["edge"].access_string) : [
        for key in ["danmaku:{auth}:epoch:1", "danmaku:{auth}:pub"] :
        !can(regex("^${replace(replace(replace(trimprefix(trimprefix(trimprefix(t, "%RW~"), "%W~"), "~"), "/[.{}|()+^$\\[\\]]/", "\\$0"), "*", ".*"), "?", ".")}$", key))
      ] if startswith(t, "~") || startswith(t, "%W~") || startswith(t, "%RW~")]))
    )
    error_message = "The edge's Redis user reads the token keys and cannot write them (only %R~ on danmaku:{auth}:*)."
  }
  assert {
    # The same check, proving it can fail: the gslb (the auth center) writes them.
    condition = anytrue(flatten([for t in split(" ", aws_elasticache_user.role["gslb"].access_string) : [
      can(regex("^${replace(replace(replace(trimprefix(trimprefix(trimprefix(t, "%RW~"), "%W~"), "~"), "/[.{}|()+^$\\[\\]]/", "\\$0"), "*", ".*"), "?", ".")}$", "danmaku:{auth}:epoch:1"))
    ] if startswith(t, "~") || startswith(t, "%W~") || startswith(t, "%RW~")]))
    error_message = "The gslb, which issues tokens, writes danmaku:{auth}:* (the check above is not vacuous)."
  }
}

run "plain_nodes_and_given_keys" {
  command = apply

  variables {
    node_tls_secret_arn  = null
    gift_keys_secret_arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:business/gift-keys-AbCdEf"
  }

  assert {
    condition = alltrue([
      aws_vpc_security_group_ingress_rule.public_role["edge"].from_port == 7702,
      aws_vpc_security_group_ingress_rule.public_role["ingest"].from_port == 7701,
      strcontains(output.boot_user_data["edge"], "BOOT_URL_SCHEME='ws'"),
      strcontains(output.boot_user_data["edge"], "BOOT_PUBLIC_PORT='7702'"),
      strcontains(output.boot_user_data["edge"], "BOOT_TLS_SECRET=''"),
      strcontains(output.boot_user_data["edge"], "BOOT_BIND_PRIVILEGED='0'"),
      join(" ", output.role_args.edge) == "-edge 0.0.0.0:7702 -metrics-addr 0.0.0.0:7712 -min-gift-value 0 -log-json -log-level info -segment-ms 1000",
      join(" ", output.role_args.ingest) == "-ingest 0.0.0.0:7701 -metrics-addr 0.0.0.0:7711 -log-json -log-level info -segment-ms 1000",
    ])
    error_message = "Without a node certificate, edges and ingest nodes serve plain on their own port, with no capability."
  }
  assert {
    condition     = output.secret_arns["gift-keys"] == var.gift_keys_secret_arn && !contains(keys(aws_secretsmanager_secret.owned), "gift-keys")
    error_message = "Given gift keys are used as they are, not generated."
  }
}

run "ticket_key_rotation" {
  command = apply

  variables {
    ticket_key_previous_secret_arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:login/ticket-key-old-AbCdEf"
  }

  assert {
    condition = alltrue([
      output.role_secret_env.gslb["DANMAKU_TICKET_KEY"] == var.ticket_key_secret_arn,
      output.role_secret_env.gslb["DANMAKU_TICKET_KEY_PREVIOUS"] == var.ticket_key_previous_secret_arn,
      !contains(keys(aws_secretsmanager_secret.owned), "ticket-key-previous"),
      alltrue([for r in ["ingest", "edge", "slicer"] : !contains(keys(output.role_secret_env[r]), "DANMAKU_TICKET_KEY_PREVIOUS")]),
    ])
    error_message = "During a rotation the gslb alone reads the previous ticket key, from the business's own secret (none is generated)."
  }
  assert {
    condition = contains(flatten([
      for s in jsondecode(aws_iam_role_policy.role["gslb"].policy).Statement : s.Resource if s.Action == "secretsmanager:GetSecretValue"
    ]), var.ticket_key_previous_secret_arn)
    error_message = "The gslb's instance role may read the previous ticket key's secret."
  }
}

run "bad_previous_ticket_key_is_refused" {
  command = plan

  variables {
    ticket_key_previous_secret_arn = "login/ticket-key-old"
  }

  expect_failures = [var.ticket_key_previous_secret_arn]
}

run "invalid_settings_are_refused" {
  command = plan

  variables {
    event                    = "Bad_Name"
    slicer_fleet             = { instance_type = "c7i.large", count = 1 }
    edge_fleet               = { instance_type = "c6in.large", count = 0 }
    default_segment_ms       = 300
    redis_shards             = 0
    redis_replicas_per_shard = 0
    cors_origins             = ["https://app.example.com/path"]
    s3_prefix                = "/rooms"
    segment_retention_days   = 0
    not_found_cache_seconds  = 10
  }

  expect_failures = [
    var.event,
    var.slicer_fleet,
    var.edge_fleet,
    var.default_segment_ms,
    var.redis_shards,
    var.redis_replicas_per_shard,
    var.cors_origins,
    var.s3_prefix,
    var.segment_retention_days,
    var.not_found_cache_seconds,
  ]
}

run "the_image_is_pinned" {
  command = plan

  variables {
    ami_id                   = "al2023-latest"
    redis_maintenance_window = "sunday 18:00"
  }

  expect_failures = [var.ami_id, var.redis_maintenance_window]
}
