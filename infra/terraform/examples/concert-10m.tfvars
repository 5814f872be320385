# A concert with ten million viewers at once.
#
#   cp examples/backend.tf backend.tf
#   terraform init -backend-config="key=danmaku/concert-10m.tfstate"
#   terraform apply -var-file=examples/concert-10m.tfvars
#
# Per-machine figures are docs/benchmarks.md's (2-vCPU machine, load client
# on the same cores: conservative); compute.tf's local.capacity_figures says
# which, by section. The quotas and reservations this needs, and when to ask for them:
# docs/operations.md, "Pre-show checklist".
#
# This is the hand-written, worst-case sizing. `danmaku plan` sizes the same
# show from a calibrated profile: examples/plan/concert-10m.event.json gives
# examples/plan/concert-10m.tfvars (sizing variables only, applied after this
# file: -var-file=examples/concert-10m.tfvars -var-file=examples/plan/concert-10m.tfvars);
# docs/operations.md, "Sizing a show", compares the two figure by figure.

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
# Amazon Linux 2023 (x86_64), looked up once and pinned: the image the
# rehearsal ran (README.md).
ami_id       = "ami-0123456789abcdef0"
cors_origins = ["https://live.example.com", "https://m.live.example.com"]

# Edges: one WebSocket per viewer; each edge serves TLS itself. CPU per
# frame written binds ("The edge terminating TLS against plain WebSocket",
# 10,000 connections: 19.8-32.0 us with TLS, 10.6-14.9 us plain; planned at
# 32 us).
#   CPU binds: 16 vCPU x 70 % / (10 frames/s x 32 us per TLS frame)
#                                                   = 35,000 connections (-max-conns)
#   (memory: 24 KiB each, 20.8 KB measured with TLS, is 0.8 GiB of 32)
#   the gslb skips an edge at 95 %                  -> 33,250 usable
#   one of three zones lost: N x 2/3 x 33,250 >= 10,000,000 -> N >= 451.1 -> 452
#   normal load 22,124 each: 7.1 vCPU of writes at 10 frames/s; the join
#   surge (1,000,000 connects/s over 452 edges) at 1.6 ms of server CPU per
#   TLS connect takes ~3.5 vCPU more for ~10 s.
# Measuring less CPU per frame lowers the count (edge_max_conns): `danmaku
# calibrate` on the 2-vCPU benchmark machine measured 17.4 us per TLS frame,
# and `danmaku plan` gives 64,400 per edge and 246 edges (examples/plan/).
edge_fleet = { instance_type = "c6in.4xlarge", count = 452, max_count = 520, alternate_instance_types = ["c6i.4xlarge", "c7i.4xlarge"] }

# Ingest: a surge of 1,000,000 comment posts a second (one viewer in ten in
# the same second), on kept-alive TLS connections.
#   measured 6,800 posts/s per vCPU through the whole path on Redis ("Upload
#   path": 13,534/s on 2 vCPU, load client included; plain HTTP: TLS in
#   the role, ~9-17 us a post by the edge's record cost, fits in the 30 % left)
#   1,000,000 / (6,800 x 70 %)                      = 210 vCPU = 14 machines
#   one zone lost: 14 x 3/2                         -> 21 (7 per zone)
#   -ingest-capacity: 16 x 70 % x 6,800/s x 0.15 s in flight = 11,400
ingest_fleet = { instance_type = "c6in.4xlarge", count = 21, max_count = 27, alternate_instance_types = ["c6i.4xlarge", "c7i.4xlarge"] }

# gslb: the show-start join surge, 10,000,000 entries over ~10 s.
#   an entry signs an Ed25519 token (22.9 us) and answers over HTTP: measured
#   20,090/s on 2 vCPU, client included ("GSLB and tokens", Entry with
#   Ed25519)                                 -> 10,000 entries/s per vCPU
#   1,000,000 / (10,000 x 70 %)                     = 143 vCPU = 9 machines
#   one zone lost: 9 x 3/2                          -> 14 -> 15 (5 per zone)
#   (`danmaku calibrate` measured 5,318 entries per CPU-second per core,
#   the load client included, on a loaded machine: `danmaku plan` gives 26;
#   calibrate on the target type to settle it)
gslb_fleet = { instance_type = "c7i.4xlarge", count = 15, max_count = 21, alternate_instance_types = ["c6i.4xlarge"] }

# The load balancers in front of the gslb: 1,000,000 new TLS connections a
# second / 25 per LCU = 40,000 LCU; one ALB reserves at most 15,000, so 3,
# each reserved 13,400 LCU before the show (not by Terraform: the request
# can take hours).
gslb_load_balancers = 3

# Slicers: one leader per room, the others standing by; three so that a
# zone's loss still leaves a standby.
slicer_fleet = { instance_type = "c7i.xlarge", count = 3, alternate_instance_types = ["c6i.xlarge"] }

# Redis: the load table is 16 shards of keys (spread over the Redis shards).
# 473 reporting nodes (452 edges, 21 ingest), each writing ~4 reports a
# second under load and at most 20 ("Load reports"), ~127 bytes a row; 15
# gslb, each syncing every 5 ms, read every report once: ~3.6 MB/s, 18 MB/s
# at worst. A room's keys share a shard: its live stream is read by up to
# 452 edges and a slicer. `danmaku plan` counts ~19,400 commands/s in all
# (load reports most of it; the room ~4,700), 28 % of one shard planned at
# 100,000 commands/s: the 4 shards below are headroom, not need.
redis_node_type          = "cache.r7g.xlarge"
redis_shards             = 4
redis_replicas_per_shard = 2
redis_maintenance_window = "tue:17:00-tue:18:00" # 02:00 JST, no show

default_segment_ms = 1000
# Viewers everywhere in the world watch the same show.
cdn_price_class         = "PriceClass_All"
not_found_cache_seconds = 1
segment_retention_days  = 30
audit_retention_days    = 30
# Each machine's agent sends its metrics to the event's Prometheus workspace
# (observability.tf); a Prometheus of your own inside the event's VPC may
# scrape the gslb and the slicers too.
metrics_cidrs = ["10.42.0.0/16"]
