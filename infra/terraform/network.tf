# The event's own VPC. Every machine sits in a public subnet with a public
# address: edges and ingest nodes must (clients connect to them directly),
# and the gslb and slicer machines use theirs only for outbound calls
# (Secrets Manager, SSM, package mirrors) — no NAT gateway to pay for or to
# saturate. Security groups, not subnets, keep inbound traffic out. Redis
# sits in private subnets with no route to the internet at all.

resource "aws_vpc" "this" {
  cidr_block           = var.vpc_cidr
  enable_dns_support   = true
  enable_dns_hostnames = true
  tags                 = { Name = local.name }
}

resource "aws_internet_gateway" "this" {
  vpc_id = aws_vpc.this.id
  tags   = { Name = local.name }
}

resource "aws_subnet" "public" {
  count                   = length(var.availability_zones)
  vpc_id                  = aws_vpc.this.id
  availability_zone       = var.availability_zones[count.index]
  cidr_block              = local.public_subnet_cidrs[count.index]
  map_public_ip_on_launch = true
  tags                    = { Name = "${local.name}-public-${var.availability_zones[count.index]}" }
}

resource "aws_subnet" "private" {
  count             = length(var.availability_zones)
  vpc_id            = aws_vpc.this.id
  availability_zone = var.availability_zones[count.index]
  cidr_block        = cidrsubnet(var.vpc_cidr, 4, 8 + count.index)
  tags              = { Name = "${local.name}-private-${var.availability_zones[count.index]}" }
}

resource "aws_route_table" "public" {
  vpc_id = aws_vpc.this.id
  route {
    cidr_block = "0.0.0.0/0"
    gateway_id = aws_internet_gateway.this.id
  }
  tags = { Name = "${local.name}-public" }
}

resource "aws_route_table_association" "public" {
  count          = length(aws_subnet.public)
  subnet_id      = aws_subnet.public[count.index].id
  route_table_id = aws_route_table.public.id
}

# The slicer's PUTs (and the binary download at boot) reach S3 inside AWS's
# network: lower and steadier latency than through the internet gateway, and
# no data processing charge.
resource "aws_vpc_endpoint" "s3" {
  vpc_id            = aws_vpc.this.id
  service_name      = "com.amazonaws.${var.region}.s3"
  vpc_endpoint_type = "Gateway"
  route_table_ids   = [aws_route_table.public.id]
  tags              = { Name = "${local.name}-s3" }
}

# ---------------------------------------------------------------------------
# Security groups
# ---------------------------------------------------------------------------

resource "aws_security_group" "alb" {
  name        = "${local.name}-gslb-alb"
  description = "gslb load balancer: HTTPS from anywhere"
  vpc_id      = aws_vpc.this.id
}

resource "aws_security_group" "role" {
  for_each    = toset(local.roles)
  name        = "${local.name}-${each.key}"
  description = "danmaku ${each.key} machines"
  vpc_id      = aws_vpc.this.id
}

resource "aws_security_group" "redis" {
  name        = "${local.name}-redis"
  description = "ElastiCache Redis: the roles only"
  vpc_id      = aws_vpc.this.id
}

resource "aws_vpc_security_group_ingress_rule" "alb" {
  for_each          = { https = 443, http = 80 }
  security_group_id = aws_security_group.alb.id
  description       = each.key == "https" ? "entry requests" : "redirected to HTTPS"
  ip_protocol       = "tcp"
  from_port         = each.value
  to_port           = each.value
  cidr_ipv4         = "0.0.0.0/0"
}

resource "aws_vpc_security_group_egress_rule" "alb_to_gslb" {
  security_group_id            = aws_security_group.alb.id
  description                  = "to the gslb machines"
  ip_protocol                  = "tcp"
  from_port                    = local.port.gslb
  to_port                      = local.port.gslb
  referenced_security_group_id = aws_security_group.role["gslb"].id
}

resource "aws_vpc_security_group_ingress_rule" "gslb_from_alb" {
  security_group_id            = aws_security_group.role["gslb"].id
  description                  = "entry requests and health checks from the load balancer"
  ip_protocol                  = "tcp"
  from_port                    = local.port.gslb
  to_port                      = local.port.gslb
  referenced_security_group_id = aws_security_group.alb.id
}

resource "aws_vpc_security_group_ingress_rule" "public_role" {
  for_each          = toset(local.public_roles)
  security_group_id = aws_security_group.role[each.key].id
  description       = "clients connect directly"
  ip_protocol       = "tcp"
  from_port         = local.public_port[each.key]
  to_port           = local.public_port[each.key]
  cidr_ipv4         = "0.0.0.0/0"
}

# Scrapers reach /metrics on each role's metrics port (local.metrics_port):
# the gslb's and the slicer's own port, which only they and (for the gslb)
# the load balancers may reach; the edge's and the ingest's metrics
# listener (-metrics-addr), a port of its own beside the public one, which
# answers /metrics with a 404.
locals {
  metrics_roles  = local.roles
  private_ranges = ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10"]
  metrics_cidr_ok = {
    for c in var.metrics_cidrs : c => (
      # inside the event's VPC ...
      (tonumber(split("/", c)[1]) >= tonumber(split("/", var.vpc_cidr)[1]) &&
      cidrsubnet(format("%s/%s", cidrhost(c, 0), split("/", var.vpc_cidr)[1]), 0, 0) == cidrsubnet(var.vpc_cidr, 0, 0))
      ||
      # ... or public, /16 or narrower: no private range outside the VPC
      # can reach it (no peering here).
      (tonumber(split("/", c)[1]) >= 16 && !anytrue([for p in local.private_ranges :
        tonumber(split("/", c)[1]) >= tonumber(split("/", p)[1]) &&
        cidrsubnet(format("%s/%s", cidrhost(c, 0), split("/", p)[1]), 0, 0) == cidrsubnet(p, 0, 0)
      ]))
    )
  }
}

resource "aws_vpc_security_group_ingress_rule" "metrics" {
  for_each = {
    for pair in setproduct(local.metrics_roles, var.metrics_cidrs) : "${pair[0]}-${pair[1]}" => { role = pair[0], cidr = pair[1] }
  }
  security_group_id = aws_security_group.role[each.value.role].id
  description       = "Prometheus scrapes /metrics"
  ip_protocol       = "tcp"
  from_port         = local.metrics_port[each.value.role]
  to_port           = local.metrics_port[each.value.role]
  cidr_ipv4         = each.value.cidr

  lifecycle {
    precondition {
      condition     = local.metrics_cidr_ok[each.value.cidr]
      error_message = "metrics_cidrs: ${each.value.cidr} can never reach the machines: give a range inside vpc_cidr (${var.vpc_cidr}) or a public range of /16 or narrower."
    }
  }
}

# Outbound: Redis, S3, Secrets Manager, Route 53, Auto Scaling and SSM,
# most of them public AWS endpoints.
resource "aws_vpc_security_group_egress_rule" "role" {
  for_each          = toset(local.roles)
  security_group_id = aws_security_group.role[each.key].id
  description       = "outbound"
  ip_protocol       = "-1"
  cidr_ipv4         = "0.0.0.0/0"
}

resource "aws_vpc_security_group_ingress_rule" "redis" {
  for_each                     = toset(local.roles)
  security_group_id            = aws_security_group.redis.id
  description                  = "Redis from ${each.key}"
  ip_protocol                  = "tcp"
  from_port                    = local.redis_port
  to_port                      = local.redis_port
  referenced_security_group_id = aws_security_group.role[each.key].id
}
