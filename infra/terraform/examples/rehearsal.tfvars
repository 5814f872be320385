# A rehearsal: the whole system at the smallest size that still has every
# part of the real one (two zones, Redis failover, TLS on the nodes, two
# slicers), torn down the same evening.
#
#   terraform workspace new rehearsal
#   terraform apply -var-file=examples/rehearsal.tfvars
#   ...
#   terraform destroy -var-file=examples/rehearsal.tfvars

event              = "rehearsal"
region             = "ap-northeast-1"
availability_zones = ["ap-northeast-1a", "ap-northeast-1c"]

domain                = "rehearsal.live.example.com"
dns_zone_id           = "Z0123456789EXAMPLE"
gslb_certificate_arn  = "arn:aws:acm:ap-northeast-1:123456789012:certificate/00000000-0000-0000-0000-000000000003"
cdn_certificate_arn   = null
node_tls_secret_arn   = "arn:aws:secretsmanager:ap-northeast-1:123456789012:secret:danmaku/rehearsal-nodes-tls-AbCdEf"
ticket_key_secret_arn = "arn:aws:secretsmanager:ap-northeast-1:123456789012:secret:login/ticket-key-staging-AbCdEf"
release_s3_uri        = "s3://artifacts-example/danmaku/v1.0.0-rc1/danmaku-linux-amd64"
# Amazon Linux 2023 for x86_64, looked up once and pinned (README.md).
ami_id       = "ami-0123456789abcdef0"
cors_origins = ["https://staging.live.example.com"]

# A few thousand test clients: 2 of everything, one per zone.
gslb_fleet   = { instance_type = "c7i.large", count = 2 }
ingest_fleet = { instance_type = "c6in.large", count = 2 }
edge_fleet   = { instance_type = "c6in.xlarge", count = 2 }
slicer_fleet = { instance_type = "c7i.large", count = 2 }

redis_node_type          = "cache.t4g.medium"
redis_shards             = 2
redis_replicas_per_shard = 1
redis_maintenance_window = "mon:03:00-mon:04:00"

cdn_price_class        = "PriceClass_200"
segment_retention_days = 3
# Torn down right after: nothing to keep, and the name reusable at once.
force_destroy_bucket       = true
force_destroy_audit_bucket = true
audit_retention_days       = 3
secret_recovery_days       = 0
