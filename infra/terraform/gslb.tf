# The gslb is the one role behind load balancers: every client's first
# request (GET /v1/entry) and clock samples (GET /v1/time) go to
# https://gslb.DOMAIN, and any gslb machine can answer any of them.
#
# gslb_load_balancers ALBs, each behind a weighted gslb.DOMAIN record
# (dns.tf) with a target group of its own (a target group belongs to one
# load balancer); every gslb machine is in all of them. One ALB takes at
# most a 15,000 LCU reservation, 375,000 new connections a second: a larger
# join surge is spread over several.
#
# No capacity reservation here: AWS fills one as capacity allows, which can
# take hours, and the provider gives up after 10 minutes (a failed apply).
# Operators request it before the show (docs/operations.md, "Pre-show
# checklist"), and Terraform leaves it alone.

resource "aws_lb" "gslb" {
  count              = var.gslb_load_balancers
  name               = local.lb_names[count.index]
  load_balancer_type = "application"
  internal           = false
  subnets            = aws_subnet.public[*].id
  security_groups    = [aws_security_group.alb.id]
  enable_http2       = true
  # Header smuggling defence: the gslb reads headers (Authorization, Origin)
  # and nothing legitimate sends malformed ones.
  drop_invalid_header_fields = true
  idle_timeout               = 60
  # The ALB appends the client's address to X-Forwarded-For, which the gslb
  # believes from these subnets only (DANMAKU_TRUSTED_PROXIES); a header the
  # client sent stays in front of it, never in its place.
  xff_header_processing_mode = "append"

  lifecycle {
    # Set by operators before the show (aws elbv2 modify-capacity-reservation),
    # released after it: an apply in between must not undo it.
    ignore_changes = [minimum_load_balancer_capacity]
  }
}

resource "aws_lb_target_group" "gslb" {
  count    = var.gslb_load_balancers
  name     = local.lb_names[count.index]
  port     = local.port.gslb
  protocol = "HTTP"
  vpc_id   = aws_vpc.this.id
  # Entry requests are short; a machine leaving need not be waited on long.
  deregistration_delay = 15

  # Also the auto scaling group's health: a gslb whose /healthz fails this
  # check is replaced.
  health_check {
    path                = "/healthz"
    port                = "traffic-port"
    protocol            = "HTTP"
    matcher             = "200"
    interval            = 10
    timeout             = 5
    healthy_threshold   = 2
    unhealthy_threshold = 2
  }
}

resource "aws_lb_listener" "gslb_https" {
  count             = var.gslb_load_balancers
  load_balancer_arn = aws_lb.gslb[count.index].arn
  port              = 443
  protocol          = "HTTPS"
  ssl_policy        = "ELBSecurityPolicy-TLS13-1-2-2021-06"
  certificate_arn   = var.gslb_certificate_arn

  default_action {
    type             = "forward"
    target_group_arn = aws_lb_target_group.gslb[count.index].arn
  }
}

# /metrics is for the operators' scrapers (metrics_cidrs, on the gslb's own
# port), never for the internet: the load balancer answers it itself, with
# the coded 404 of an unknown path.
resource "aws_lb_listener_rule" "gslb_no_metrics" {
  count        = var.gslb_load_balancers
  listener_arn = aws_lb_listener.gslb_https[count.index].arn
  priority     = 1

  condition {
    path_pattern {
      values = ["/metrics", "/metrics/*"]
    }
  }

  action {
    type = "fixed-response"
    fixed_response {
      content_type = "application/json"
      status_code  = "404"
      message_body = jsonencode({ error = { code = "not_found", message = "no such endpoint" } })
    }
  }
}

resource "aws_lb_listener" "gslb_http" {
  count             = var.gslb_load_balancers
  load_balancer_arn = aws_lb.gslb[count.index].arn
  port              = 80
  protocol          = "HTTP"

  default_action {
    type = "redirect"
    redirect {
      port        = "443"
      protocol    = "HTTPS"
      status_code = "HTTP_301"
    }
  }
}

# A state from before gslb_load_balancers keeps its one load balancer.
moved {
  from = aws_lb.gslb
  to   = aws_lb.gslb[0]
}

moved {
  from = aws_lb_target_group.gslb
  to   = aws_lb_target_group.gslb[0]
}

moved {
  from = aws_lb_listener.gslb_https
  to   = aws_lb_listener.gslb_https[0]
}

moved {
  from = aws_lb_listener.gslb_http
  to   = aws_lb_listener.gslb_http[0]
}
