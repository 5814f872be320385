# ---------------------------------------------------------------------------
# The event
# ---------------------------------------------------------------------------

variable "event" {
  description = "Short name of the event; names every resource, so two events never collide in one account. One Terraform state per event."
  type        = string
  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,18}[a-z0-9]$", var.event))
    error_message = "event is 3-20 characters of a-z, 0-9 and '-', starting with a letter (it goes into bucket, cache and ElastiCache user names)."
  }
}

variable "region" {
  description = "AWS region of everything but CloudFront (global)."
  type        = string
  validation {
    condition     = can(regex("^[a-z]{2}(-[a-z]+)+-[0-9]+$", var.region))
    error_message = "region is an AWS region name such as ap-northeast-1."
  }
}

variable "availability_zones" {
  description = "Availability zones to spread every fleet and Redis over. Three lets the edge fleet lose one and still hold the audience (see the sizing in README.md)."
  type        = list(string)
  validation {
    condition     = length(var.availability_zones) >= 2 && length(var.availability_zones) <= 6 && length(distinct(var.availability_zones)) == length(var.availability_zones)
    error_message = "Give 2 to 6 distinct availability zones: Multi-AZ Redis needs at least 2."
  }
}

variable "vpc_cidr" {
  description = "CIDR of the event's VPC; a /16 leaves a /20 (4,091 addresses) per subnet."
  type        = string
  default     = "10.42.0.0/16"
  validation {
    condition     = can(cidrhost(var.vpc_cidr, 0)) && tonumber(split("/", var.vpc_cidr)[1]) <= 18
    error_message = "vpc_cidr must be an IPv4 CIDR of /18 or larger."
  }
}

variable "tags" {
  description = "Tags added to every resource (the event's name is always added as danmaku:event)."
  type        = map(string)
  default     = {}
}

# ---------------------------------------------------------------------------
# DNS and certificates
# ---------------------------------------------------------------------------

variable "domain" {
  description = "DNS name the event lives under, inside dns_zone_id's zone: gslb.DOMAIN (entry), cdn.DOMAIN (segments), e-A-B-C-D.nodes.DOMAIN and i-A-B-C-D.nodes.DOMAIN (one per edge and ingest machine)."
  type        = string
  validation {
    condition     = can(regex("^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\\.)+[a-z]{2,63}$", var.domain))
    error_message = "domain is a lower-case DNS name without a trailing dot."
  }
}

variable "dns_zone_id" {
  description = "Route 53 hosted zone that holds domain's records."
  type        = string
}

variable "gslb_certificate_arn" {
  description = "ACM certificate in var.region for gslb.DOMAIN, served by the gslb's load balancer."
  type        = string
  validation {
    condition     = can(regex("^arn:aws[a-z-]*:acm:[a-z0-9-]+:[0-9]{12}:certificate/", var.gslb_certificate_arn))
    error_message = "gslb_certificate_arn is an ACM certificate ARN."
  }
}

variable "cdn_certificate_arn" {
  description = "ACM certificate in us-east-1 for cdn.DOMAIN. Null: clients get the distribution's own *.cloudfront.net name and no cdn.DOMAIN record is made."
  type        = string
  default     = null
  validation {
    condition     = var.cdn_certificate_arn == null || can(regex("^arn:aws[a-z-]*:acm:us-east-1:[0-9]{12}:certificate/", var.cdn_certificate_arn))
    error_message = "CloudFront only takes certificates from us-east-1."
  }
}

variable "node_tls_secret_arn" {
  description = "Secrets Manager secret holding a PEM bundle (private key and certificate chain) for *.nodes.DOMAIN. Set: edge and ingest machines terminate TLS on 443 (wss://, https://), which browsers require. Null: plain ws:// and http:// on the role's port, usable by native clients only (rehearsals)."
  type        = string
  default     = null
}

# ---------------------------------------------------------------------------
# Machines
# ---------------------------------------------------------------------------

variable "release_s3_uri" {
  description = "s3:// URI of the danmaku binary (`go build ./cmd/danmaku` for linux and var.arch), downloaded by every machine at boot; the roles may read that one object. Null: the binary is baked into ami_id at /usr/local/bin/danmaku, and no role reads anything outside the event's own resources."
  type        = string
  default     = null
  validation {
    condition     = var.release_s3_uri == null || can(regex("^s3://[a-z0-9][a-z0-9.-]+[a-z0-9]/.+", var.release_s3_uri))
    error_message = "release_s3_uri is s3://BUCKET/KEY."
  }
}

variable "release_sha256" {
  description = "SHA-256 of the danmaku binary (downloaded or baked in); a machine whose binary does not match refuses to start. Null skips the check."
  type        = string
  default     = null
  validation {
    condition     = var.release_sha256 == null || can(regex("^[0-9a-f]{64}$", var.release_sha256))
    error_message = "release_sha256 is 64 lower-case hex digits."
  }
}

variable "arch" {
  description = "CPU architecture of every machine (and so of the binary and the AMI): x86_64 or arm64."
  type        = string
  default     = "x86_64"
  validation {
    condition     = contains(["x86_64", "arm64"], var.arch)
    error_message = "arch is x86_64 or arm64."
  }
}

variable "ami_id" {
  description = "AMI for every machine, based on Amazon Linux 2023 (the boot script uses dnf, the AWS CLI and systemd). Null: the latest Amazon Linux 2023 for var.arch, read from its public SSM parameter at plan time; then release_s3_uri is required."
  type        = string
  default     = null
}

variable "gslb_fleet" {
  description = "gslb machines behind the load balancer: instance type and count (max_count bounds manual scale-out; default count)."
  type = object({
    instance_type = string
    count         = number
    max_count     = optional(number)
  })
  validation {
    condition     = var.gslb_fleet.count >= 1 && coalesce(var.gslb_fleet.max_count, var.gslb_fleet.count) >= var.gslb_fleet.count
    error_message = "gslb_fleet.count is at least 1 and max_count, when set, at least count."
  }
}

variable "ingest_fleet" {
  description = "ingest machines, each with its own public address: instance type and count (max_count bounds manual scale-out; default count)."
  type = object({
    instance_type = string
    count         = number
    max_count     = optional(number)
  })
  validation {
    condition     = var.ingest_fleet.count >= 1 && coalesce(var.ingest_fleet.max_count, var.ingest_fleet.count) >= var.ingest_fleet.count
    error_message = "ingest_fleet.count is at least 1 and max_count, when set, at least count."
  }
}

variable "edge_fleet" {
  description = "edge (WebSocket) machines, each with its own public address: instance type and count (max_count bounds manual scale-out; default count)."
  type = object({
    instance_type = string
    count         = number
    max_count     = optional(number)
  })
  validation {
    condition     = var.edge_fleet.count >= 1 && coalesce(var.edge_fleet.max_count, var.edge_fleet.count) >= var.edge_fleet.count
    error_message = "edge_fleet.count is at least 1 and max_count, when set, at least count."
  }
}

variable "slicer_fleet" {
  description = "slicer machines: one leads each room, the others stand by to take over within 2.5 s. At least 2."
  type = object({
    instance_type = string
    count         = number
    max_count     = optional(number)
  })
  default = {
    instance_type = "c7i.xlarge"
    count         = 2
  }
  validation {
    condition     = var.slicer_fleet.count >= 2 && coalesce(var.slicer_fleet.max_count, var.slicer_fleet.count) >= var.slicer_fleet.count
    error_message = "slicer_fleet.count is at least 2 (a leader and a standby) and max_count, when set, at least count."
  }
}

variable "gslb_alb_capacity_units" {
  description = "Load balancer capacity units reserved on the gslb's ALB ahead of the show-start surge (0: none, the ALB scales on its own, too slowly for a surge)."
  type        = number
  default     = 0
  validation {
    condition     = var.gslb_alb_capacity_units >= 0 && floor(var.gslb_alb_capacity_units) == var.gslb_alb_capacity_units
    error_message = "gslb_alb_capacity_units is a whole number, 0 or more."
  }
}

variable "metrics_cidrs" {
  description = "IPv4 CIDRs allowed to scrape every role's /metrics (Prometheus) on the role's port."
  type        = list(string)
  default     = []
  validation {
    condition     = alltrue([for c in var.metrics_cidrs : can(cidrhost(c, 0))])
    error_message = "metrics_cidrs holds IPv4 CIDRs."
  }
}

variable "enable_ssm" {
  description = "Let operators reach machines through SSM Session Manager (shell, port forwarding to the slicer's admin API) instead of SSH; no inbound port is opened either way."
  type        = bool
  default     = true
}

# ---------------------------------------------------------------------------
# Application settings handed to the roles
# ---------------------------------------------------------------------------

variable "cors_origins" {
  description = "Web origins whose pages may call the gslb and ingest, connect to edges and fetch segments from the CDN (DANMAKU_CORS_ORIGINS and the CDN's CORS headers); [\"*\"] for any."
  type        = list(string)
  validation {
    condition     = length(var.cors_origins) >= 1 && alltrue([for o in var.cors_origins : o == "*" || can(regex("^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?$", o))])
    error_message = "cors_origins holds \"*\" or origins like https://app.example.com (scheme, host, optional port, no path)."
  }
}

variable "default_segment_ms" {
  description = "Segment duration of rooms without their own setting (-segment-ms): 1000, 500 or 250 ms."
  type        = number
  default     = 1000
  validation {
    condition     = contains([1000, 500, 250], var.default_segment_ms)
    error_message = "default_segment_ms is 1000, 500 or 250."
  }
}

variable "budget" {
  description = "Messages per second a room's segments show (-budget). Null: the application's default (60)."
  type        = number
  default     = null
  validation {
    condition     = var.budget == null || try(var.budget >= 1 && floor(var.budget) == var.budget, false)
    error_message = "budget is a whole number, at least 1."
  }
}

variable "min_gift_value" {
  description = "Lowest gift value the edges push over WebSocket (-min-gift-value); cheaper gifts reach viewers through segments only."
  type        = number
  default     = 0
  validation {
    condition     = var.min_gift_value >= 0 && floor(var.min_gift_value) == var.min_gift_value
    error_message = "min_gift_value is a whole number, 0 or more."
  }
}

variable "log_level" {
  description = "Log level of every role (-log-level)."
  type        = string
  default     = "info"
  validation {
    condition     = contains(["debug", "info", "warn", "error"], var.log_level)
    error_message = "log_level is debug, info, warn or error."
  }
}

# ---------------------------------------------------------------------------
# Segments: bucket and CDN
# ---------------------------------------------------------------------------

variable "s3_prefix" {
  description = "Key prefix inside the bucket (DANMAKU_S3_PREFIX): empty, or ending in '/'. The bucket is the event's own, so empty is the usual choice."
  type        = string
  default     = ""
  validation {
    condition     = var.s3_prefix == "" || can(regex("^[A-Za-z0-9._-][A-Za-z0-9._/-]*/$", var.s3_prefix))
    error_message = "s3_prefix is empty or ends in '/', and does not start with '/'."
  }
}

variable "segment_retention_days" {
  description = "Days segments are kept (replay reads them) before the bucket's lifecycle rule deletes them."
  type        = number
  default     = 30
  validation {
    condition     = var.segment_retention_days >= 1 && floor(var.segment_retention_days) == var.segment_retention_days
    error_message = "segment_retention_days is a whole number of days, at least 1."
  }
}

variable "force_destroy_bucket" {
  description = "Let `terraform destroy` delete the bucket while it still holds segments (otherwise empty it, or wait for the lifecycle rule, first)."
  type        = bool
  default     = false
}

variable "cdn_price_class" {
  description = "CloudFront price class: PriceClass_All serves every viewer from a nearby location; 100 and 200 are cheaper and slower for viewers outside their regions."
  type        = string
  default     = "PriceClass_All"
  validation {
    condition     = contains(["PriceClass_All", "PriceClass_200", "PriceClass_100"], var.cdn_price_class)
    error_message = "cdn_price_class is PriceClass_All, PriceClass_200 or PriceClass_100."
  }
}

variable "origin_shield_region" {
  description = "Region of CloudFront's Origin Shield, the one cache layer every location asks before S3. Null: var.region (the bucket's)."
  type        = string
  default     = null
}

variable "not_found_cache_seconds" {
  description = "How long CloudFront caches a 404 (a segment asked for before it was written) and any other error: 0 or 1. See README.md for the trade-off."
  type        = number
  default     = 1
  validation {
    condition     = contains([0, 1], var.not_found_cache_seconds)
    error_message = "not_found_cache_seconds is 0 or 1: longer would hide a written segment from viewers for longer than a segment lasts."
  }
}

# ---------------------------------------------------------------------------
# Redis (ElastiCache, cluster mode enabled)
# ---------------------------------------------------------------------------

variable "redis_node_type" {
  description = "ElastiCache node type of every shard's primary and replicas."
  type        = string
  default     = "cache.r7g.large"
  validation {
    condition     = startswith(var.redis_node_type, "cache.")
    error_message = "redis_node_type is an ElastiCache node type (cache.…)."
  }
}

variable "redis_shards" {
  description = "Number of shards (node groups). Each room's keys share one hash slot, so a room lives on one shard; shards spread rooms and the shared keys."
  type        = number
  default     = 3
  validation {
    condition     = var.redis_shards >= 1 && var.redis_shards <= 500 && floor(var.redis_shards) == var.redis_shards
    error_message = "redis_shards is a whole number from 1 to 500."
  }
}

variable "redis_replicas_per_shard" {
  description = "Replicas per shard, in other availability zones than their primary (1-5). At least 1: automatic failover needs a replica to promote."
  type        = number
  default     = 2
  validation {
    condition     = var.redis_replicas_per_shard >= 1 && var.redis_replicas_per_shard <= 5 && floor(var.redis_replicas_per_shard) == var.redis_replicas_per_shard
    error_message = "redis_replicas_per_shard is a whole number from 1 to 5."
  }
}

variable "redis_engine_version" {
  description = "Redis engine version (7.x: ACL users with key patterns and command categories)."
  type        = string
  default     = "7.1"
  validation {
    condition     = can(regex("^7\\.[0-9]+$", var.redis_engine_version))
    error_message = "redis_engine_version is 7.x."
  }
}

variable "redis_snapshot_retention_days" {
  description = "Days of daily Redis snapshots kept (0: none). Snapshots are no substitute for durability: see the durability note in README.md."
  type        = number
  default     = 0
  validation {
    condition     = var.redis_snapshot_retention_days >= 0 && var.redis_snapshot_retention_days <= 35
    error_message = "redis_snapshot_retention_days is 0 to 35."
  }
}

variable "redis_access_strings" {
  description = "Redis ACL access string per role (gslb, ingest, edge, slicer), overriding the default \"on ~danmaku:* +@all -@dangerous\": every role's keys under the project's prefix, no administrative or dangerous command."
  type        = map(string)
  default     = {}
  validation {
    condition     = alltrue([for k in keys(var.redis_access_strings) : contains(["gslb", "ingest", "edge", "slicer"], k)])
    error_message = "redis_access_strings keys are gslb, ingest, edge and slicer."
  }
}

# ---------------------------------------------------------------------------
# Secrets
# ---------------------------------------------------------------------------

variable "ticket_key_secret_arn" {
  description = "Existing Secrets Manager secret holding the business ticket key (DANMAKU_TICKET_KEY), shared with the login service; only the gslb reads it."
  type        = string
  validation {
    condition     = can(regex("^arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:[0-9]{12}:secret:", var.ticket_key_secret_arn))
    error_message = "ticket_key_secret_arn is a Secrets Manager secret ARN."
  }
}

variable "gift_keys_secret_arn" {
  description = "Existing secret holding the gift API keys (DANMAKU_GIFT_KEYS, comma list) the business servers use. Null: the module generates one key in a secret of its own (output secret_arns.gift_keys)."
  type        = string
  default     = null
}

variable "announce_keys_secret_arn" {
  description = "Existing secret holding the keys business servers post announcements with (DANMAKU_ANNOUNCE_KEYS). Null: the module generates one key."
  type        = string
  default     = null
}

variable "secrets_kms_key_arns" {
  description = "Customer managed KMS keys that encrypt the existing secrets above; the roles that read those secrets may decrypt with them through Secrets Manager only."
  type        = list(string)
  default     = []
}

variable "secret_generation" {
  description = "Generation of the secrets this module generates (master key, operator keys, Redis passwords, and the gift and announcement keys unless given). Increase it to replace them all; restart the roles afterwards."
  type        = number
  default     = 1
  validation {
    condition     = var.secret_generation >= 1 && floor(var.secret_generation) == var.secret_generation
    error_message = "secret_generation is a whole number, at least 1."
  }
}

variable "secret_recovery_days" {
  description = "Days a deleted secret can still be restored (0: deleted at once, so that an event name can be reused right after `terraform destroy`)."
  type        = number
  default     = 7
  validation {
    condition     = var.secret_recovery_days == 0 || (var.secret_recovery_days >= 7 && var.secret_recovery_days <= 30)
    error_message = "secret_recovery_days is 0 or 7 to 30."
  }
}
