# The gslb is the one role behind a load balancer: every client's first
# request (GET /v1/entry) and clock samples (GET /v1/time) go to
# https://gslb.DOMAIN, and any gslb machine can answer any of them.

resource "aws_lb" "gslb" {
  name               = "${local.name}-gslb"
  load_balancer_type = "application"
  internal           = false
  subnets            = aws_subnet.public[*].id
  security_groups    = [aws_security_group.alb.id]
  enable_http2       = true
  # Header smuggling defence: the gslb reads headers (Authorization, Origin)
  # and nothing legitimate sends malformed ones.
  drop_invalid_header_fields = true
  idle_timeout               = 60

  dynamic "minimum_load_balancer_capacity" {
    for_each = var.gslb_alb_capacity_units > 0 ? [var.gslb_alb_capacity_units] : []
    content {
      capacity_units = minimum_load_balancer_capacity.value
    }
  }
}

resource "aws_lb_target_group" "gslb" {
  name     = "${local.name}-gslb"
  port     = local.port.gslb
  protocol = "HTTP"
  vpc_id   = aws_vpc.this.id
  # Entry requests are short; a machine leaving need not be waited on long.
  deregistration_delay = 15

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
  load_balancer_arn = aws_lb.gslb.arn
  port              = 443
  protocol          = "HTTPS"
  ssl_policy        = "ELBSecurityPolicy-TLS13-1-2-2021-06"
  certificate_arn   = var.gslb_certificate_arn

  default_action {
    type             = "forward"
    target_group_arn = aws_lb_target_group.gslb.arn
  }
}

resource "aws_lb_listener" "gslb_http" {
  load_balancer_arn = aws_lb.gslb.arn
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
