# The deployment conformance test (conformance_test.go) starts the roles
# from this apply's outputs: the env files env.sh prints from its state and
# the boot user data node-boot.sh runs with. Mocked AWS (test.sh render);
# an event as a real one would be set up, with node TLS on, so that edge
# and ingest serve TLS themselves, and a small edge capacity the test can
# fill.

mock_provider "aws" {
  source = "./tests/mocks"
}

# The mock would give both buckets one name.
override_resource {
  target = module.audit_bucket.aws_s3_bucket.this
  values = {
    arn = "arn:aws:s3:::danmaku-conform-audit-123456789012"
  }
}

variables {
  event                    = "conform"
  region                   = "us-east-1"
  availability_zones       = ["us-east-1a", "us-east-1b", "us-east-1c"]
  domain                   = "conform.live.example.com"
  dns_zone_id              = "Z0123456789EXAMPLE"
  gslb_certificate_arn     = "arn:aws:acm:us-east-1:123456789012:certificate/00000000-0000-0000-0000-000000000001"
  ticket_key_secret_arn    = "arn:aws:secretsmanager:us-east-1:123456789012:secret:login/ticket-key-AbCdEf"
  node_tls_secret_arn      = "arn:aws:secretsmanager:us-east-1:123456789012:secret:danmaku/nodes-tls-AbCdEf"
  ami_id                   = "ami-0123456789abcdef0"
  redis_maintenance_window = "sun:18:00-sun:19:00"
  cors_origins             = ["https://app.example.com"]
  gslb_fleet               = { instance_type = "c7i.large", count = 1 }
  ingest_fleet             = { instance_type = "c6in.large", count = 1 }
  edge_fleet               = { instance_type = "c6in.large", count = 2 }
  # The smallest capacity the variable takes: the test opens as many
  # connections.
  edge_max_conns = 100
}

run "conformance" {
  command = apply

  assert {
    condition     = output.node_capacity.edge_max_conns == 100 && strcontains(output.env_edge, "DANMAKU_MAX_CONNS='100'")
    error_message = "The edges' env file carries the capacity Terraform sets."
  }
}
