# What makes the deployment hold what the tests of the code prove, and apply
# the first time: names every AWS resource accepts, no wait AWS cannot
# meet, fleets that keep trying and replace a dead role, node names that go
# with their machine, a pinned image, Redis maintenance when the operators
# say, tags on everything, /metrics never public, a durable audit trail,
# TLS in the roles, and capacity from the instance type.

mock_provider "aws" {
  source = "./tests/mocks"
}

override_resource {
  target = module.audit_bucket.aws_s3_bucket.this
  values = {
    arn = "arn:aws:s3:::danmaku-test-audit-123456789012"
  }
}

# Two vCPUs, 4 GiB: an edge whose capacity the test can work out.
override_data {
  target = data.aws_ec2_instance_type.fleet["c6in.large"]
  values = {
    default_vcpus           = 2
    memory_size             = 4096
    supported_architectures = ["x86_64"]
  }
}

override_data {
  target = data.aws_ec2_instance_type.fleet["m7g.large"]
  values = {
    default_vcpus           = 2
    memory_size             = 8192
    supported_architectures = ["arm64"]
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
  cors_origins             = ["https://app.example.com"]
  tags                     = { team = "live-ops" }
  gslb_fleet               = { instance_type = "c7i.4xlarge", count = 3 }
  ingest_fleet             = { instance_type = "c6in.4xlarge", count = 3, alternate_instance_types = ["c6i.4xlarge"] }
  edge_fleet               = { instance_type = "c6in.large", count = 6, max_count = 9 }
  metrics_cidrs            = ["10.42.200.0/24", "198.51.100.0/24"]
}

run "names_at_their_maximum" {
  command = plan

  variables {
    event               = "tokyo-dome-2025-live" # 20 characters, the most accepted
    gslb_load_balancers = 5
  }

  assert {
    condition = alltrue(flatten([for names in [aws_lb.gslb[*].name, aws_lb_target_group.gslb[*].name] : [
      for n in names : length(n) <= 32 && can(regex("^[a-z0-9][a-z0-9-]*[a-z0-9]$", n)) && !startswith(n, "internal-")
    ]]))
    error_message = "Load balancer and target group names are at most 32 characters of a-z, 0-9 and '-', not starting or ending with '-'."
  }
  assert {
    condition     = length(distinct(aws_lb.gslb[*].name)) == 5 && alltrue([for n in aws_lb.gslb[*].name : startswith(n, "danmaku-tokyo-dome-2")])
    error_message = "Shortened names stay distinct and recognisable."
  }
  assert {
    condition = alltrue([for id in concat(
      [aws_elasticache_replication_group.redis.replication_group_id, aws_elasticache_user_group.redis.user_group_id, aws_elasticache_user.default.user_id],
      [for u in aws_elasticache_user.role : u.user_id],
      [aws_elasticache_user.ops.user_id],
    ) : length(id) <= 40 && can(regex("^[a-z][a-z0-9-]*[a-z0-9]$", id)) && !strcontains(id, "--")])
    error_message = "ElastiCache ids are at most 40 characters, start with a letter, end with a letter or digit, and hold no \"--\"."
  }
  assert {
    condition = alltrue([for n in [aws_elasticache_parameter_group.redis.name, aws_elasticache_subnet_group.redis.name] :
    length(n) <= 255 && !strcontains(n, "--") && !endswith(n, "-")])
    error_message = "ElastiCache group names hold no \"--\"."
  }
  assert {
    condition = alltrue(concat(
      [for r in aws_iam_role.role : length(r.name) <= 64],
      [length(aws_iam_role.node_records.name) <= 64, length(aws_iam_role.node_records_start.name) <= 64],
      [for p in aws_iam_instance_profile.role : length(p.name) <= 128],
      [length(module.segments_bucket.id) <= 63, length(module.audit_bucket.id) <= 63],
      [for t in aws_launch_template.role : length(t.name) <= 128],
      [length(aws_ssm_document.node_records.name) <= 128, length(aws_cloudwatch_event_rule.node_records.name) <= 64],
      [length(aws_cloudfront_function.refuse_escapes.name) <= 64, length(aws_cloudfront_origin_access_control.segments.name) <= 64],
      [for n in [aws_cloudfront_cache_policy.segments.name, aws_cloudfront_cache_policy.manifest.name, aws_cloudfront_origin_request_policy.none.name, aws_cloudfront_response_headers_policy.cors.name] : length(n) <= 128],
      [for s in aws_secretsmanager_secret.owned : length(s.name) <= 512],
    ))
    error_message = "Every other name fits its resource's limit."
  }
}

# Each of these would fail an apply minutes in; they fail the plan.
run "bad_names_and_public_metrics_fail_the_plan" {
  command = plan

  variables {
    event         = "concert--tokyo"
    metrics_cidrs = ["0.0.0.0/0"]
  }

  expect_failures = [var.event, var.metrics_cidrs]
}

run "unreachable_scrapers_and_mismatched_alternates_fail_the_plan" {
  command = plan

  variables {
    metrics_cidrs = ["10.100.0.0/16"]
    edge_fleet    = { instance_type = "c6in.large", count = 6, alternate_instance_types = ["c7i.4xlarge", "m7g.large"] }
  }

  expect_failures = [aws_vpc_security_group_ingress_rule.metrics, aws_launch_template.role["edge"]]
}

run "plan_defaults" {
  command = plan

  assert {
    condition     = aws_lb.gslb[0].name == "danmaku-test-gslb" && aws_lb_target_group.gslb[0].name == "danmaku-test-gslb"
    error_message = "A name that fits is not shortened."
  }

  assert {
    condition = (
      aws_elasticache_replication_group.redis.maintenance_window == "sun:18:00-sun:19:00" &&
      aws_elasticache_replication_group.redis.auto_minor_version_upgrade == "false"
    )
    error_message = "Redis is patched in the operators' window, and its engine changes only when they change it."
  }

  assert {
    condition = (
      # 2 vCPU x 70 % / (10 frames/s x 32 µs) = 4,375; 4 GiB x 50 % / 24 KiB = 87,381
      output.role_env.edge.DANMAKU_MAX_CONNS == "4300" &&
      # 16 vCPU x 70 % x 6,800/s x 0.15 s = 11,424
      output.role_env.ingest.DANMAKU_INGEST_CAPACITY == "11400" &&
      !contains(keys(output.role_env.edge), "DANMAKU_EDGE_CAPACITY") &&
      output.node_capacity == { edge_max_conns = 4300, ingest_capacity = 11400 }
    )
    error_message = "Each edge and ingest reports a capacity worked out from its instance type."
  }
}

# One apply, everything a deployment must hold.
run "deployment" {
  command = apply

  variables {
    audit_retention_days = 45
  }

  # --- fleets that keep trying and replace a dead role -----------------------
  assert {
    condition = alltrue([for r in ["gslb", "ingest", "edge", "slicer"] :
      aws_autoscaling_group.role[r].ignore_failed_scaling_activities &&
      aws_autoscaling_group.role[r].wait_for_capacity_timeout == "0" &&
      aws_autoscaling_group.role[r].health_check_grace_period == 300
    ])
    error_message = "No apply waits for a fleet or fails on a failed launch (a failed wait would mark the group for replacement)."
  }
  assert {
    condition = alltrue([for r in ["gslb", "ingest", "edge", "slicer"] : alltrue([
      for d in one(aws_autoscaling_group.role[r].mixed_instances_policy).instances_distribution :
      d.on_demand_allocation_strategy == "prioritized" && d.on_demand_percentage_above_base_capacity == 100
    ])])
    error_message = "Every fleet is On-Demand, instance types tried in the order given."
  }
  assert {
    condition = (
      [for o in one(one(aws_autoscaling_group.role["ingest"].mixed_instances_policy).launch_template).override : o.instance_type] == ["c6in.4xlarge", "c6i.4xlarge"] &&
      [for o in one(one(aws_autoscaling_group.role["edge"].mixed_instances_policy).launch_template).override : o.instance_type] == ["c6in.large"] &&
      one(one(one(aws_autoscaling_group.role["ingest"].mixed_instances_policy).launch_template).launch_template_specification).launch_template_id == aws_launch_template.role["ingest"].id
    )
    error_message = "A zone without the first instance type launches the alternates, in order."
  }
  assert {
    condition = (
      aws_autoscaling_group.role["gslb"].health_check_type == "ELB" &&
      alltrue([for tg in aws_lb_target_group.gslb : one(tg.health_check).path == "/healthz" && one(tg.health_check).matcher == "200"]) &&
      alltrue([for r in ["ingest", "edge", "slicer"] : aws_autoscaling_group.role[r].health_check_type == "EC2"])
    )
    error_message = "The gslb's health is its target groups' /healthz; the others' is EC2's plus their own report."
  }
  assert {
    condition = alltrue(concat(
      [for r, port in { ingest = 443, edge = 443, slicer = 7704 } : strcontains(output.boot_user_data[r], "BOOT_HEALTH_URL='${r == "slicer" ? "http" : "https"}://127.0.0.1:${port}/healthz'")],
      [strcontains(output.boot_user_data["gslb"], "BOOT_HEALTH_URL=''")],
      [for r in ["ingest", "edge", "slicer"] : strcontains(output.boot_user_data[r], "BOOT_UNHEALTHY_AFTER='120'")],
    ))
    error_message = "Roles without a target group check their own /healthz and report after 120 s of failures."
  }
  assert {
    condition = alltrue([for r in ["gslb", "ingest", "edge", "slicer"] : alltrue([
      strcontains(output.boot_user_data[r], "StartLimitIntervalSec=0"),
      strcontains(output.boot_user_data[r], "Restart=always"),
      strcontains(output.boot_user_data[r], "aws autoscaling set-instance-health --instance-id \"$INSTANCE_ID\" --health-status Unhealthy --should-respect-grace-period"),
    ])])
    error_message = "systemd never gives up restarting a role; a role down too long marks its machine unhealthy."
  }
  assert {
    # The user data is gzipped (binary: base64decode cannot read it back);
    # 21,844 base64 characters are at most 16,383 bytes.
    condition     = alltrue([for r in ["gslb", "ingest", "edge", "slicer"] : length(aws_launch_template.role[r].user_data) <= 21844 && length(output.boot_user_data[r]) > 16384])
    error_message = "EC2 refuses user data over 16 KiB (before base64): the boot script and its settings, gzipped, must fit (uncompressed they do not)."
  }
  assert {
    condition = {
      for r in ["gslb", "ingest", "edge", "slicer"] : r => [for s in jsondecode(aws_iam_role_policy.role[r].policy).Statement : s.Resource if s.Sid == "ReportOwnHealth"]
      } == {
      gslb   = []
      ingest = ["arn:aws:autoscaling:us-east-1:123456789012:autoScalingGroup:*:autoScalingGroupName/danmaku-test-ingest"]
      edge   = ["arn:aws:autoscaling:us-east-1:123456789012:autoScalingGroup:*:autoScalingGroupName/danmaku-test-edge"]
      slicer = ["arn:aws:autoscaling:us-east-1:123456789012:autoScalingGroup:*:autoScalingGroupName/danmaku-test-slicer"]
    }
    error_message = "A machine may mark machines of its own group only."
  }
  assert {
    condition     = alltrue([for r in ["gslb", "ingest", "edge", "slicer"] : aws_launch_template.role[r].image_id == "ami-0123456789abcdef0"])
    error_message = "Every machine runs the pinned image."
  }

  # --- tags on everything ----------------------------------------------------
  assert {
    condition = alltrue([for r in ["gslb", "ingest", "edge", "slicer"] :
      { for t in aws_autoscaling_group.role[r].tag : t.key => t.value if t.propagate_at_launch } == {
        Name            = "danmaku-test-${r}"
        "danmaku:event" = "test"
        "danmaku:role"  = r
        team            = "live-ops"
      }
    ])
    error_message = "Every group carries the event's tags and its role, propagated to its machines."
  }
  assert {
    condition = alltrue([for r in ["gslb", "ingest", "edge", "slicer"] :
      toset([for t in aws_launch_template.role[r].tag_specifications : t.resource_type]) == toset(["instance", "volume", "network-interface"]) &&
      alltrue([for t in aws_launch_template.role[r].tag_specifications : t.tags["danmaku:event"] == "test" && t.tags["danmaku:role"] == r && t.tags.team == "live-ops"])
    ])
    error_message = "Instances, their volumes and their network interfaces are tagged at launch."
  }

  # --- /metrics never public -------------------------------------------------
  assert {
    condition = alltrue([for rule in aws_lb_listener_rule.gslb_no_metrics : (
      one(one(rule.condition).path_pattern).values == toset(["/metrics", "/metrics/*"]) &&
      one(rule.action).type == "fixed-response" &&
      one(one(rule.action).fixed_response).status_code == "404" &&
      rule.priority == 1
    )]) && length(aws_lb_listener_rule.gslb_no_metrics) == length(aws_lb_listener.gslb_https)
    error_message = "Every load balancer answers /metrics with a 404 itself."
  }
  assert {
    condition = (
      toset([for k, r in aws_vpc_security_group_ingress_rule.metrics : "${r.from_port} ${r.cidr_ipv4}"]) ==
      toset(flatten([for p in [7700, 7711, 7712, 7704] : ["${p} 10.42.200.0/24", "${p} 198.51.100.0/24"]])) &&
      alltrue([for r in aws_vpc_security_group_ingress_rule.metrics : r.from_port == r.to_port && r.from_port != 443])
    )
    error_message = "Every role's metrics port (the gslb's and the slicer's own, the edge's and the ingest's metrics listener) is open to the scrapers' ranges only; 443 is no metrics port."
  }
  assert {
    # The edge's and the ingest's public port serves no /metrics: each has
    # a metrics listener of its own, on the port the scrapers reach.
    condition = alltrue([for r, p in { ingest = 7711, edge = 7712 } :
      strcontains(join(" ", output.role_args[r]), "-metrics-addr 0.0.0.0:${p}") &&
      strcontains({ ingest = output.env_ingest, edge = output.env_edge }[r], "-metrics-addr 0.0.0.0:${p}")
    ])
    error_message = "The edge and the ingest serve /metrics on a metrics listener (-metrics-addr) of their own, not on 443."
  }
  assert {
    condition = (
      toset([for r in aws_vpc_security_group_ingress_rule.public_role : "${r.from_port} ${r.cidr_ipv4}"]) == toset(["443 0.0.0.0/0"]) &&
      aws_vpc_security_group_ingress_rule.gslb_from_alb.referenced_security_group_id == aws_security_group.alb.id
    )
    error_message = "No role port but the public roles' is open to the internet."
  }

  # --- durable audit ---------------------------------------------------------
  assert {
    condition = (
      module.audit_bucket.expiration_days == 45 &&
      module.audit_bucket.public_access_blocked &&
      module.audit_bucket.sse_algorithm == "AES256" &&
      [for s in jsondecode(module.audit_bucket.policy).Statement : s.Sid] == ["DenyPlainHTTP"] &&
      module.audit_bucket.id != module.segments_bucket.id
    )
    error_message = "The audit bucket is its own: private, encrypted, TLS only, expired after the retention, read by no CDN."
  }
  assert {
    condition = alltrue([for r in ["ingest", "slicer"] :
      output.role_env[r].DANMAKU_AUDIT_S3_BUCKET == module.audit_bucket.id &&
      output.role_env[r].DANMAKU_AUDIT_RETENTION == "1080h" &&
      output.role_env[r].DANMAKU_S3_REGION == "us-east-1"
      ]) && alltrue([for r in ["gslb", "edge"] : !contains(keys(output.role_env[r]), "DANMAKU_AUDIT_S3_BUCKET")]
    )
    error_message = "The ingest and the slicer write the trail to the audit bucket, in its region, held to the retention."
  }
  assert {
    condition = {
      for r in ["gslb", "ingest", "edge", "slicer"] : r => toset(flatten([
        for s in jsondecode(aws_iam_role_policy.role[r].policy).Statement : s.Action if strcontains(jsonencode(s.Resource), module.audit_bucket.arn)
      ]))
      } == {
      gslb   = toset([])
      ingest = toset(["s3:PutObject", "s3:ListBucket", "s3:DeleteObject"])
      edge   = toset([])
      slicer = toset(["s3:PutObject", "s3:ListBucket", "s3:DeleteObject"])
    }
    error_message = "Only the ingest and the slicer touch the audit bucket: write, and list and delete for the retention sweep."
  }
  assert {
    condition = [for s in jsondecode(aws_iam_role_policy.role["ingest"].policy).Statement : s.Condition if s.Sid == "SweepAuditList"] == [
      { StringLike = { "s3:prefix" = ["audit/*"] } }
    ]
    error_message = "The sweep lists under audit/ only."
  }

  # --- TLS in the roles, trusted proxies -------------------------------------
  assert {
    condition = (
      join(" ", output.role_args.edge) == "-edge 0.0.0.0:443 -metrics-addr 0.0.0.0:7712 -min-gift-value 0 -edge-tls-cert /etc/danmaku/tls/cert.pem -edge-tls-key /etc/danmaku/tls/key.pem -log-json -log-level info -segment-ms 1000" &&
      join(" ", output.role_args.ingest) == "-ingest 0.0.0.0:443 -metrics-addr 0.0.0.0:7711 -ingest-tls-cert /etc/danmaku/tls/cert.pem -ingest-tls-key /etc/danmaku/tls/key.pem -log-json -log-level info -segment-ms 1000"
    )
    error_message = "The edge and the ingest serve TLS themselves on 443, from the files the boot script writes."
  }
  assert {
    condition = alltrue([for r in ["edge", "ingest"] : alltrue([
      strcontains(output.boot_user_data[r], "BOOT_BIND_PRIVILEGED='1'"),
      strcontains(output.boot_user_data[r], "AmbientCapabilities=CAP_NET_BIND_SERVICE"),
      strcontains(output.boot_user_data[r], "User=danmaku"),
      strcontains(output.boot_user_data[r], "chown danmaku:danmaku \"$tmp/key.pem\" \"$tmp/cert.pem\""),
      strcontains(output.boot_user_data[r], "chmod 0400 \"$tmp/key.pem\" \"$tmp/cert.pem\""),
      strcontains(output.boot_user_data[r], "BOOT_TLS_CERT='/etc/danmaku/tls/cert.pem'"),
      !strcontains(output.boot_user_data[r], "nginx"),
    ])])
    error_message = "No proxy on the machines: the role binds 443 with that one capability, and only its user reads the key."
  }
  assert {
    condition     = alltrue([for r in ["gslb", "slicer"] : strcontains(output.boot_user_data[r], "BOOT_BIND_PRIVILEGED='0'")])
    error_message = "Roles on their own ports get no capability."
  }
  assert {
    condition = alltrue([for r, want in { gslb = "http 7700", ingest = "http 7711", edge = "http 7712", slicer = "http 7704" } : alltrue([
      strcontains(output.boot_user_data[r], "OBS_SCHEME='${split(" ", want)[0]}'"),
      strcontains(output.boot_user_data[r], "OBS_PORT='${split(" ", want)[1]}'"),
      !strcontains(output.boot_user_data[r], "OBS_PORT='443'"),
    ])])
    error_message = "Each machine's metrics agent scrapes its role's metrics port, never 443: the edge and the ingest serve no /metrics there."
  }
  assert {
    condition     = alltrue([for r in ["gslb", "ingest", "edge", "slicer"] : aws_launch_template.role[r].user_data == base64gzip(output.boot_user_data[r])])
    error_message = "The machines boot with exactly the script boot_user_data shows, compressed (over 16 KB otherwise)."
  }
  assert {
    condition = (
      output.role_env.gslb.DANMAKU_TRUSTED_PROXIES == join(",", aws_subnet.public[*].cidr_block) &&
      output.role_env.gslb.DANMAKU_TRUSTED_PROXIES == "10.42.0.0/20,10.42.16.0/20,10.42.32.0/20" &&
      output.role_env.gslb.DANMAKU_GSLB_NODES == "3" &&
      alltrue([for r in ["ingest", "edge", "slicer"] : !contains(keys(output.role_env[r]), "DANMAKU_TRUSTED_PROXIES")])
    )
    error_message = "The gslb believes X-Forwarded-For from its load balancers' subnets only; the roles clients reach directly believe none."
  }

  # --- node names go with their machine --------------------------------------
  assert {
    condition = jsondecode(aws_cloudwatch_event_rule.node_records.event_pattern) == {
      source        = ["aws.ec2"]
      "detail-type" = ["EC2 Instance State-change Notification"]
      detail        = { state = ["shutting-down", "stopping"] }
    }
    error_message = "Every instance that shuts down or stops, however, starts the cleaner."
  }
  assert {
    condition = (
      aws_cloudwatch_event_target.node_records.arn == "arn:aws:ssm:us-east-1:123456789012:automation-definition/danmaku-test-node-records:$DEFAULT" &&
      one(aws_cloudwatch_event_target.node_records.input_transformer).input_paths == tomap({ instance = "$.detail.instance-id" }) &&
      jsondecode(replace(one(aws_cloudwatch_event_target.node_records.input_transformer).input_template, "<instance>", "i-0abc")) == { InstanceId = ["i-0abc"] }
    )
    error_message = "The cleaner gets the instance id of the event."
  }
  assert {
    condition = (
      one(jsondecode(aws_ssm_document.node_records.content).mainSteps).inputs.Script == file("node-records.py") &&
      one(jsondecode(aws_ssm_document.node_records.content).mainSteps).inputs.InputPayload == {
        InstanceId = "{{ InstanceId }}", ZoneId = "Z0123456789EXAMPLE", Domain = "nodes.test.live.example.com", Prefixes = ["i", "e"]
      }
    )
    error_message = "The cleaner deletes i-INSTANCE and e-INSTANCE under nodes.DOMAIN in the event's zone."
  }
  assert {
    condition = [for s in jsondecode(aws_iam_role_policy.node_records.policy).Statement : s.Condition if s.Sid == "DeleteNodeNames"] == [{
      "ForAllValues:StringLike" = {
        "route53:ChangeResourceRecordSetsNormalizedRecordNames" = ["i-*.nodes.test.live.example.com", "e-*.nodes.test.live.example.com"]
      }
      "ForAllValues:StringEquals" = {
        "route53:ChangeResourceRecordSetsRecordTypes" = ["A"]
        "route53:ChangeResourceRecordSetsActions"     = ["DELETE"]
      }
    }]
    error_message = "The cleaner may delete node names and nothing else."
  }
  assert {
    condition = (
      jsondecode(aws_iam_role.node_records.assume_role_policy).Statement == [{
        Effect    = "Allow", Principal = { Service = "ssm.amazonaws.com" }, Action = "sts:AssumeRole",
        Condition = { StringEquals = { "aws:SourceAccount" = "123456789012" } }
      }] &&
      one(jsondecode(aws_iam_role.node_records_start.assume_role_policy).Statement).Principal.Service == "events.amazonaws.com"
    )
    error_message = "Only SSM Automation runs the cleaner's role, and only EventBridge starts it, on this account's behalf."
  }
  assert {
    condition     = alltrue([for r in ["edge", "ingest"] : strcontains(output.boot_user_data[r], "node_name=\"$BOOT_NODE_NAME_PREFIX-$instance_id.$BOOT_NODE_DOMAIN\"")])
    error_message = "A machine's name is its instance id's: what the cleaner finds."
  }
}

run "join_surge_and_measured_capacity" {
  command = apply

  variables {
    gslb_load_balancers = 3
    edge_max_conns      = 50000
    ingest_capacity     = 2000
  }

  override_resource {
    target = aws_lb_target_group.gslb[1]
    values = { arn = "arn:aws:elasticloadbalancing:us-east-1:123456789012:targetgroup/danmaku-test-gslb2/73e2d6bc24d8a068" }
  }

  override_resource {
    target = aws_lb_target_group.gslb[2]
    values = { arn = "arn:aws:elasticloadbalancing:us-east-1:123456789012:targetgroup/danmaku-test-gslb3/73e2d6bc24d8a069" }
  }

  assert {
    condition     = alltrue([for lb in aws_lb.gslb : length(lb.minimum_load_balancer_capacity) == 0])
    error_message = "No load balancer capacity reservation inside an apply: it can take hours, the provider waits 10 minutes."
  }
  assert {
    condition = (
      length(aws_lb.gslb) == 3 && length(aws_lb_target_group.gslb) == 3 &&
      length(aws_autoscaling_group.role["gslb"].target_group_arns) == 3 &&
      alltrue([for r in aws_route53_record.gslb : r.name == "gslb.test.live.example.com" && one(r.weighted_routing_policy).weight == 1]) &&
      length(distinct(aws_route53_record.gslb[*].set_identifier)) == 3
    )
    error_message = "Several load balancers share the join surge: one weighted record and one target group each, every gslb in all."
  }

  assert {
    condition     = output.role_env.edge.DANMAKU_MAX_CONNS == "50000" && output.role_env.ingest.DANMAKU_INGEST_CAPACITY == "2000"
    error_message = "A measured capacity wins over the derived one."
  }
}
