# One EC2 auto scaling group per role, all from the same boot script
# (node-boot.sh). README.md says why EC2 rather than Fargate.
#
# The fleets are sized ahead of the show and held there (min = desired):
# a scaling policy reacts in minutes, too late for a show start, and scaling
# in would cut 100,000 WebSockets at a time. No instance refresh either: a
# new launch template version applies to machines launched from then on,
# never to running ones in the middle of a show.

data "aws_ssm_parameter" "al2023" {
  count = var.ami_id == null ? 1 : 0
  name  = "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-${var.arch}"
}

locals {
  ami_id = var.ami_id != null ? var.ami_id : nonsensitive(data.aws_ssm_parameter.al2023[0].value)

  boot_settings = {
    for r in local.roles : r => merge(
      {
        BOOT_ROLE           = r
        BOOT_REGION         = var.region
        BOOT_RELEASE        = var.release_s3_uri != null ? var.release_s3_uri : ""
        BOOT_RELEASE_SHA256 = var.release_sha256 != null ? var.release_sha256 : ""
        BOOT_PORT           = tostring(local.port[r])
        BOOT_ENV_B64        = base64encode(local.env_file[r])
        BOOT_ARGS_B64       = base64encode(join("\n", local.role_args[r]))
      },
      !contains(local.public_roles, r) ? {} : {
        BOOT_NODE_NAME_PREFIX = local.node_name_prefix[r]
        BOOT_NODE_DOMAIN      = local.node_domain
        BOOT_ZONE_ID          = var.dns_zone_id
        BOOT_URL_ENV          = local.node_url[r].env
        BOOT_URL_SCHEME       = local.node_url[r].scheme
        BOOT_URL_PATH         = local.node_url[r].path
        BOOT_PUBLIC_PORT      = tostring(local.public_port[r])
        BOOT_TLS_SECRET       = local.node_tls ? var.node_tls_secret_arn : ""
      },
    )
  }

  # Every value above is a name, an ARN, a URL or base64, none holding a
  # single quote, so single quotes are all the shell quoting needed.
  user_data = {
    for r in local.roles : r => join("\n", concat(
      ["#!/bin/bash"],
      [for k in sort(keys(local.boot_settings[r])) : "${k}='${local.boot_settings[r][k]}'"],
      [file("${path.module}/node-boot.sh")],
    ))
  }
}

resource "aws_launch_template" "role" {
  for_each               = toset(local.roles)
  name                   = "${local.name}-${each.key}"
  description            = "danmaku ${each.key} of event ${var.event}"
  image_id               = local.ami_id
  instance_type          = local.fleet[each.key].instance_type
  update_default_version = true
  user_data              = base64encode(local.user_data[each.key])

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

  lifecycle {
    precondition {
      condition     = var.release_s3_uri != null || var.ami_id != null
      error_message = "Set release_s3_uri (the binary is downloaded at boot), or ami_id for an image with the binary baked in at /usr/local/bin/danmaku."
    }
  }

  tag_specifications {
    resource_type = "instance"
    tags = merge(var.tags, {
      Name            = "${local.name}-${each.key}"
      "danmaku:event" = var.event
      "danmaku:role"  = each.key
    })
  }
}

resource "aws_autoscaling_group" "role" {
  for_each            = toset(local.roles)
  name                = "${local.name}-${each.key}"
  min_size            = local.fleet[each.key].count
  desired_capacity    = local.fleet[each.key].count
  max_size            = coalesce(local.fleet[each.key].max_count, local.fleet[each.key].count)
  vpc_zone_identifier = aws_subnet.public[*].id

  launch_template {
    id      = aws_launch_template.role[each.key].id
    version = aws_launch_template.role[each.key].latest_version
  }

  target_group_arns         = each.key == "gslb" ? [aws_lb_target_group.gslb.arn] : []
  health_check_type         = each.key == "gslb" ? "ELB" : "EC2"
  health_check_grace_period = 300
  # Booting a fleet of 160 takes a while (Route 53 publishes 5 names a
  # second); apply waits for it rather than returning a half-built fleet.
  wait_for_capacity_timeout = "30m"

  # AZRebalance would terminate machines to even out the zones: for an edge
  # that is 100,000 viewers reconnecting.
  suspended_processes = contains(local.public_roles, each.key) ? ["AZRebalance"] : []

  tag {
    key                 = "danmaku:role"
    value               = each.key
    propagate_at_launch = false
  }
}
