# Sizing of "concert-10m", written by danmaku plan -event infra/terraform/examples/plan/concert-10m.event.json -profile infra/profiles/this-machine.json
# (profile taken 2026-12-06T04:46:09Z on 2 cores "AMD EPYC", Linux 6.18.44-fc-v1272, linux/amd64, go1.26.8). Re-run danmaku plan rather than edit.
#   terraform apply -var-file=SITE.tfvars -var-file=THIS.tfvars
# Binds first as the load grows: edge.

# edge: count set by CPU per frame written; connects per second runs out first (72 % at the peak).
edge_fleet = { instance_type = "c6in.4xlarge", count = 195, max_count = 225, alternate_instance_types = ["c6i.4xlarge", "c7i.4xlarge"] }
# ingest: count set by CPU per post; CPU (idle + posts) runs out first (64 % at the peak).
ingest_fleet = { instance_type = "c6in.4xlarge", count = 32, max_count = 37, alternate_instance_types = ["c6i.4xlarge", "c7i.4xlarge"] }
# gslb: count set by CPU per entry (join surge); CPU (idle + entries at the join surge) runs out first (55 % at the peak).
gslb_fleet = { instance_type = "c7i.4xlarge", count = 11, max_count = 13, alternate_instance_types = ["c6i.4xlarge"] }
# slicer: count set by a standby after 1 zone(s) lost; CPU (idle + rooms led) runs out first (0 % at the peak).
slicer_fleet = { instance_type = "c7i.xlarge", count = 2, max_count = 2, alternate_instance_types = ["c6i.xlarge"] }

edge_max_conns      = 81400
ingest_capacity     = 7200
gslb_load_balancers = 3 # reserve 13400 LCU each before the show (quota checklist)

redis_node_type          = "cache.r7g.xlarge"
redis_shards             = 1 # 43,452 commands/s, busiest shard 43,452/s
redis_replicas_per_shard = 2

default_segment_ms = 1000
budget             = 60
min_gift_value     = 0
