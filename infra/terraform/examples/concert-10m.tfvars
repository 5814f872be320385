# A concert with ten million viewers at once.
#
#   terraform workspace new concert-2025-tokyo   # or a backend key per event
#   terraform apply -var-file=examples/concert-10m.tfvars
#
# The sizing, figure by figure (README.md, "Sizing", says where each
# per-machine figure comes from and which of them a load test must confirm
# before the show).

event              = "concert-10m"
region             = "ap-northeast-1"
availability_zones = ["ap-northeast-1a", "ap-northeast-1c", "ap-northeast-1d"]

domain                = "concert-10m.live.example.com"
dns_zone_id           = "Z0123456789EXAMPLE"
gslb_certificate_arn  = "arn:aws:acm:ap-northeast-1:123456789012:certificate/00000000-0000-0000-0000-000000000001"
cdn_certificate_arn   = "arn:aws:acm:us-east-1:123456789012:certificate/00000000-0000-0000-0000-000000000002"
node_tls_secret_arn   = "arn:aws:secretsmanager:ap-northeast-1:123456789012:secret:danmaku/nodes-tls-AbCdEf"
ticket_key_secret_arn = "arn:aws:secretsmanager:ap-northeast-1:123456789012:secret:login/ticket-key-AbCdEf"
release_s3_uri        = "s3://artifacts-example/danmaku/v1.0.0/danmaku-linux-amd64"
cors_origins          = ["https://live.example.com", "https://m.live.example.com"]

# Edges: one WebSocket per viewer.
#   10,000,000 connections / 100,000 per machine        = 100 machines at 100 %
#   the gslb stops handing out a machine at 95 %          -> 10,000,000 / 95,000 = 106
#   losing one of the three zones must still fit:
#     N x 2/3 x 95,000 >= 10,000,000                      -> N >= 158 -> 160
#   normal load 10,000,000 / 160 = 62,500 per machine (62.5 %)
# c6in.4xlarge: 16 vCPU for TLS and the gift frames' fan-out, 32 GiB for
# 100,000 connections at ~64 KiB each (nginx TLS + the role's buffers),
# 50 Gbps. max_count leaves room to add machines by hand during the show.
edge_fleet = { instance_type = "c6in.4xlarge", count = 160, max_count = 200 }

# Ingest: a surge of 1,000,000 comment posts a second (one viewer in ten
# reacting within the same second). Most are answered by the per-user and
# per-room buckets, but each still costs TLS, a token check and JSON:
#   assumed 2,000 posts/s per vCPU                        -> 500 vCPU
#   500 / 16 vCPU per c6in.4xlarge                        = 32 machines at 100 %
#   at 70 % for headroom                                  -> 45 -> 48 (16 per zone)
ingest_fleet = { instance_type = "c6in.4xlarge", count = 48, max_count = 64 }

# gslb: the show-start join surge, 10,000,000 entries spread over ~10 s:
#   peak 1,000,000 GET /v1/entry a second
#   assumed 2,500 entries/s per vCPU (two HS256 operations and JSON; TLS
#   ends at the load balancer)                            -> 400 vCPU
#   400 / 16 vCPU per c7i.4xlarge                         = 25 machines at 100 %
#   at 70 %                                               -> 36 (12 per zone)
gslb_fleet = { instance_type = "c7i.4xlarge", count = 36, max_count = 48 }

# The load balancer in front of the gslb does not grow in seconds. By its
# new-connection dimension (25 new connections a second per LCU),
#   1,000,000 new connections/s / 25                      = 40,000 LCU
# Reservations are filled as capacity allows and can take hours: request
# days ahead, or put CloudFront in front of the load balancer (README.md).
gslb_alb_capacity_units = 40000

# Slicers: one leader per room, the others standing by; three so that a
# zone's loss still leaves a standby.
slicer_fleet = { instance_type = "c7i.xlarge", count = 3 }

# Redis: a room's keys live on one shard, so shards spread rooms, not one
# room's load. The hottest single key is the load table (danmaku:load):
#   writes: (160 edges + 48 ingest) x 200 reports/s        = 41,600 HSET/s
#   reads:  36 gslb x 200 syncs/s x ~52 KB (208 entries)   = ~375 MB/s, ~3 Gbps
# from the one shard that holds it: node type for network, not memory.
redis_node_type          = "cache.r7g.4xlarge"
redis_shards             = 3
redis_replicas_per_shard = 2

default_segment_ms = 1000
# Viewers everywhere in the world watch the same show.
cdn_price_class         = "PriceClass_All"
not_found_cache_seconds = 1
segment_retention_days  = 30
metrics_cidrs           = ["10.100.0.0/16"]
