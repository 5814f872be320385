# One EC2 auto scaling group per role, all from the same boot script
# (node-boot.sh). README.md says why EC2 rather than Fargate.
#
# The fleets are sized ahead of the show and held there (min = desired):
# a scaling policy reacts in minutes, too late for a show start, and scaling
# in would cut 100,000 WebSockets at a time. No instance refresh either: a
# new launch template version applies to machines launched from then on,
# never to running ones in the middle of a show.
#
# Apply-safe: an apply never waits for machines (wait_for_capacity_timeout
# "0"), so a zone short of an instance type, or a vCPU quota short of the
# fleet, leaves a group that keeps trying rather than a failed apply that
# marks the whole fleet for replacement at the next one. Each group may
# launch alternate instance types of the same size, in order, when a zone
# has none of the first; docs/operations.md's pre-show checklist covers
# the quotas and how to see that every fleet is full.

# What each instance type offers, read once per plan (not a moving target
# like an image): capacity is derived from it, and a misspelt or
# wrong-architecture type fails the plan instead of the launch.
data "aws_ec2_instance_type" "fleet" {
  for_each      = toset(flatten([for r in local.roles : local.fleet_types[r]]))
  instance_type = each.key
}

locals {
  fleet_types = { for r in local.roles : r => distinct(concat([local.fleet[r].instance_type], local.fleet[r].alternate_instance_types)) }
  # The smallest machine a fleet may get: capacity is set per role, so it
  # must hold on every type the group may launch.
  fleet_vcpus      = { for r in local.roles : r => min([for t in local.fleet_types[r] : data.aws_ec2_instance_type.fleet[t].default_vcpus]...) }
  fleet_memory_mib = { for r in local.roles : r => min([for t in local.fleet_types[r] : data.aws_ec2_instance_type.fleet[t].memory_size]...) }

  # Capacity from the instance type. The figures, and where each comes
  # from (docs/benchmarks.md):
  capacity_figures = {
    # The share of a machine's CPU planned for steady load; the rest is for
    # the join surge's TLS handshakes and a lost zone's reconnects.
    cpu_target = 0.7
    # Edge: CPU per frame written to one connection, TLS in the role.
    # Measured at 10,000 connections ("The edge terminating TLS against
    # plain WebSocket"): 19.8 and 32.0 µs with TLS (session medians;
    # plain 10.6 and 14.9 µs in the same runs), on a shared 2-vCPU machine
    # under load; a quiet machine wrote a plain frame for 9.7 µs ("Edge on
    # its event loop"), and TLS costs 1.9-2.2x plain. Planned at the upper
    # TLS figure until `danmaku calibrate` measures the instance type
    # (then edge_max_conns).
    edge_cpu_us_per_write = 32
    # Frames each viewer gets a second at the show's peak: a room's gifts
    # and system messages share a frame per 55 ms merge window, so at most
    # 18; 10 is the gift rate the benchmarks run (raise min_gift_value if a
    # show pushes more).
    edge_frames_per_second = 10
    # Memory per connection: a TLS connection's RSS growth measured 20.8-21.0
    # KB (heap and stacks 19.6-19.8 KB: a reader and a writer goroutine and
    # crypto/tls's buffers; plain 0.56 KB), same section, plus the kernel's
    # socket, rounded up.
    edge_kib_per_conn = 24
    # Share of memory planned for connections.
    edge_memory_share = 0.5
    # Ingest: comments a second per vCPU through the whole barrage path on
    # Redis ("Upload path": 13,534 req/s on 2 vCPU with the load client on
    # the same cores), plain HTTP: TLS in the role (a record opened and one
    # sealed per post on a kept-alive connection) is not measured for the
    # ingest; the edge's TLS record costs 9-17 µs, against 147 µs a post,
    # inside the 30 % of CPU not planned.
    ingest_posts_per_vcpu = 6800
    # How long a comment is in flight: it waits for its room's next flush,
    # one per 150 ms window.
    ingest_seconds_in_flight = 0.15
  }
  capacity = {
    # CPU binds on every instance type the module has been sized for (the
    # memory bound is ~20× higher); the lower of the two, in hundreds.
    edge_max_conns = var.edge_max_conns != null ? var.edge_max_conns : floor(min(
      local.fleet_vcpus.edge * local.capacity_figures.cpu_target / (local.capacity_figures.edge_frames_per_second * local.capacity_figures.edge_cpu_us_per_write / 1000000),
      local.fleet_memory_mib.edge * 1024 * local.capacity_figures.edge_memory_share / local.capacity_figures.edge_kib_per_conn,
    ) / 100) * 100
    ingest_capacity = var.ingest_capacity != null ? var.ingest_capacity : floor(
      local.fleet_vcpus.ingest * local.capacity_figures.cpu_target * local.capacity_figures.ingest_posts_per_vcpu * local.capacity_figures.ingest_seconds_in_flight / 100
    ) * 100
  }

  # Roles without a target group (every one but the gslb) check their own
  # /healthz and tell their group when it has failed too long (node-boot.sh,
  # danmaku-health).
  self_health = { for r in local.roles : r => r != "gslb" }
  health_url = {
    for r in local.roles : r => "${contains(local.public_roles, r) && local.node_tls ? "https" : "http"}://127.0.0.1:${local.listen_port[r]}/healthz"
  }

  asg_name = { for r in local.roles : r => "${local.name}-${r}" }

  boot_settings = {
    for r in local.roles : r => merge(
      {
        BOOT_ROLE            = r
        BOOT_REGION          = var.region
        BOOT_RELEASE         = var.release_s3_uri != null ? var.release_s3_uri : ""
        BOOT_RELEASE_SHA256  = var.release_sha256 != null ? var.release_sha256 : ""
        BOOT_ENV_B64         = base64encode(local.env_file[r])
        BOOT_ARGS_B64        = base64encode(join("\n", local.role_args[r]))
        BOOT_HEALTH_URL      = local.self_health[r] ? local.health_url[r] : ""
        BOOT_UNHEALTHY_AFTER = tostring(var.node_unhealthy_after_seconds)
        # Port 443 needs CAP_NET_BIND_SERVICE, given to the role's unit.
        BOOT_BIND_PRIVILEGED = local.listen_port[r] < 1024 ? "1" : "0"
      },
      !contains(local.public_roles, r) ? {} : {
        BOOT_NODE_NAME_PREFIX = local.node_name_prefix[r]
        BOOT_NODE_DOMAIN      = local.node_domain
        BOOT_ZONE_ID          = var.dns_zone_id
        BOOT_URL_ENV          = local.node_url[r].env
        BOOT_URL_SCHEME       = local.node_url[r].scheme
        BOOT_URL_PATH         = local.node_url[r].path
        BOOT_PUBLIC_PORT      = tostring(local.public_port[r])
        BOOT_NODE_RECORD_TTL  = tostring(local.node_record_ttl)
        BOOT_TLS_SECRET       = local.node_tls ? var.node_tls_secret_arn : ""
        BOOT_TLS_CERT         = local.node_tls ? local.tls_files.cert : ""
        BOOT_TLS_KEY          = local.node_tls ? local.tls_files.key : ""
      },
    )
  }

  # Every value above is a name, an ARN, a URL, a path or base64, none
  # holding a single quote, so single quotes are all the shell quoting
  # needed. The observability boot (observability.tf) runs first, so that
  # the role's log is shipped from its first line.
  user_data = {
    for r in local.roles : r => join("\n", concat(
      ["#!/bin/bash"],
      [for k in sort(keys(local.boot_settings[r])) : "${k}='${local.boot_settings[r][k]}'"],
      [local.observability_boot[r]],
      [file("${path.module}/node-boot.sh")],
    ))
  }

  # Tags of a role's machines and everything launched with them (volumes,
  # network interfaces): the provider's default_tags reach neither the
  # instances an auto scaling group launches nor their volumes.
  machine_tags = {
    for r in local.roles : r => merge(var.tags, {
      Name            = "${local.name}-${r}"
      "danmaku:event" = var.event
      "danmaku:role"  = r
    })
  }
}

resource "aws_launch_template" "role" {
  for_each               = toset(local.roles)
  name                   = "${local.name}-${each.key}"
  description            = "danmaku ${each.key} of event ${var.event}"
  image_id               = var.ami_id
  instance_type          = local.fleet[each.key].instance_type
  update_default_version = true
  # gzip: the scripts are larger than the 16 KB EC2 takes; cloud-init
  # unpacks them.
  user_data = base64gzip(local.user_data[each.key])

  iam_instance_profile {
    arn = aws_iam_instance_profile.role[each.key].arn
  }

  # Every machine gets a public address (network.tf); for edge and ingest it
  # is the one clients are handed.
  network_interfaces {
    associate_public_ip_address = true
    delete_on_termination       = true
    security_groups             = [aws_security_group.role[each.key].id]
  }

  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 1
  }

  monitoring {
    enabled = true
  }

  block_device_mappings {
    device_name = "/dev/xvda"
    ebs {
      volume_size           = 16
      volume_type           = "gp3"
      encrypted             = true
      delete_on_termination = true
    }
  }

  dynamic "tag_specifications" {
    for_each = ["instance", "volume", "network-interface"]
    content {
      resource_type = tag_specifications.value
      tags          = local.machine_tags[each.key]
    }
  }

  lifecycle {
    precondition {
      condition     = length(base64gzip(local.user_data[each.key])) <= 21844
      error_message = "The ${each.key} machines' user data is over the 16 KB EC2 takes, even compressed."
    }
    precondition {
      condition     = alltrue([for t in local.fleet_types[each.key] : contains(data.aws_ec2_instance_type.fleet[t].supported_architectures, var.arch)])
      error_message = "Every instance type of the ${each.key} fleet must run ${var.arch} (var.arch, the AMI's and the binary's architecture)."
    }
    precondition {
      condition     = length(distinct([for t in local.fleet_types[each.key] : data.aws_ec2_instance_type.fleet[t].default_vcpus])) == 1
      error_message = "The ${each.key} fleet's alternate instance types must have as many vCPUs as its instance type: the fleet's count and capacity are sized per machine."
    }
  }
}

resource "aws_autoscaling_group" "role" {
  for_each            = toset(local.roles)
  name                = local.asg_name[each.key]
  min_size            = local.fleet[each.key].count
  desired_capacity    = local.fleet[each.key].count
  max_size            = coalesce(local.fleet[each.key].max_count, local.fleet[each.key].count)
  vpc_zone_identifier = aws_subnet.public[*].id

  # On-Demand only, the types in the order given: the first wherever a zone
  # has it, an alternate where it has not.
  mixed_instances_policy {
    instances_distribution {
      on_demand_allocation_strategy            = "prioritized"
      on_demand_base_capacity                  = 0
      on_demand_percentage_above_base_capacity = 100
    }
    launch_template {
      launch_template_specification {
        launch_template_id = aws_launch_template.role[each.key].id
        version            = aws_launch_template.role[each.key].latest_version
      }
      dynamic "override" {
        for_each = local.fleet_types[each.key]
        content {
          instance_type = override.value
        }
      }
    }
  }

  target_group_arns = each.key == "gslb" ? aws_lb_target_group.gslb[*].arn : []
  # The gslb's health is its target groups' check of /healthz; the other
  # roles report their own (danmaku-health on each machine sets the
  # instance unhealthy), on top of EC2's status checks.
  health_check_type         = each.key == "gslb" ? "ELB" : "EC2"
  health_check_grace_period = 300

  # Never wait for the fleet inside an apply, and never fail it on a launch
  # that failed (a zone's capacity, the vCPU quota): the group keeps trying
  # on its own, and a failed wait would mark the group for replacement.
  wait_for_capacity_timeout        = "0"
  ignore_failed_scaling_activities = true

  # AZRebalance would terminate machines to even out the zones: for an edge
  # that is 100,000 viewers reconnecting.
  suspended_processes = contains(local.public_roles, each.key) ? ["AZRebalance"] : []

  dynamic "tag" {
    for_each = local.machine_tags[each.key]
    content {
      key                 = tag.key
      value               = tag.value
      propagate_at_launch = true
    }
  }

  # A machine's node name is deleted when it goes (node_records.tf): what
  # does that must still be there while `terraform destroy` empties the
  # groups.
  depends_on = [
    aws_cloudwatch_event_target.node_records,
    aws_iam_role_policy.node_records,
    aws_iam_role_policy.node_records_start,
  ]
}
