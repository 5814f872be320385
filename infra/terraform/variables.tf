# ---------------------------------------------------------------------------
# The event
# ---------------------------------------------------------------------------

variable "event" {
  description = "Short name of the event; names every resource, so two events never collide in one account. One Terraform state per event."
  type        = string
  validation {
    # What every name built from it accepts: ElastiCache ids refuse "--"
    # and a trailing '-'; the 32-character load balancer and target group
    # names are shortened with a hash where "danmaku-EVENT-gslb" would not
    # fit (main.tf, local.lb_names).
    condition     = can(regex("^[a-z][a-z0-9-]{1,18}[a-z0-9]$", var.event)) && !strcontains(var.event, "--")
    error_message = "event is 3-20 characters of a-z, 0-9 and '-', starting with a letter, ending with a letter or digit, without \"--\" (it goes into bucket, load balancer, cache and ElastiCache names)."
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
  description = "DNS name the event lives under, inside dns_zone_id's zone: gslb.DOMAIN (entry), cdn.DOMAIN (segments), e-INSTANCE.nodes.DOMAIN and i-INSTANCE.nodes.DOMAIN (one per edge and ingest machine, INSTANCE its instance id)."
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
  description = "Secrets Manager secret holding a PEM bundle (private key and certificate chain) for *.nodes.DOMAIN. Set: the edge and ingest roles serve TLS themselves on 443 (wss://, https://), which browsers require; the machines re-fetch it every 6 hours, so a renewed certificate is served without a restart. Null: plain ws:// and http:// on the role's port, usable by native clients only (rehearsals)."
  type        = string
  default     = null
  validation {
    condition     = var.node_tls_secret_arn == null || can(regex("^arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:[0-9]{12}:secret:", var.node_tls_secret_arn))
    error_message = "node_tls_secret_arn is a Secrets Manager secret ARN."
  }
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
  description = "AMI for every machine, based on Amazon Linux 2023 (the boot script uses the AWS CLI, curl and systemd), for var.arch. Pinned on purpose: a machine added mid-show must run the image the rehearsal ran, not whatever is newest then. README.md says how to look up the current Amazon Linux 2023 image."
  type        = string
  validation {
    condition     = can(regex("^ami-([0-9a-f]{8}|[0-9a-f]{17})$", var.ami_id))
    error_message = "ami_id is an AMI id such as ami-0123456789abcdef0."
  }
}

variable "gslb_fleet" {
  description = "gslb machines behind the load balancer: instance type and count (max_count bounds manual scale-out; default count), and alternate_instance_types with the same vCPUs, launched in that order when a zone has no capacity for the first."
  type = object({
    instance_type            = string
    count                    = number
    max_count                = optional(number)
    alternate_instance_types = optional(list(string), [])
  })
  validation {
    condition     = var.gslb_fleet.count >= 1 && coalesce(var.gslb_fleet.max_count, var.gslb_fleet.count) >= var.gslb_fleet.count
    error_message = "gslb_fleet.count is at least 1 and max_count, when set, at least count."
  }
}

variable "ingest_fleet" {
  description = "ingest machines, each with its own public address: instance type and count (max_count bounds manual scale-out; default count), and alternate_instance_types with the same vCPUs, launched in that order when a zone has no capacity for the first."
  type = object({
    instance_type            = string
    count                    = number
    max_count                = optional(number)
    alternate_instance_types = optional(list(string), [])
  })
  validation {
    condition     = var.ingest_fleet.count >= 1 && coalesce(var.ingest_fleet.max_count, var.ingest_fleet.count) >= var.ingest_fleet.count
    error_message = "ingest_fleet.count is at least 1 and max_count, when set, at least count."
  }
}

variable "edge_fleet" {
  description = "edge (WebSocket) machines, each with its own public address: instance type and count (max_count bounds manual scale-out; default count), and alternate_instance_types with the same vCPUs, launched in that order when a zone has no capacity for the first."
  type = object({
    instance_type            = string
    count                    = number
    max_count                = optional(number)
    alternate_instance_types = optional(list(string), [])
  })
  validation {
    condition     = var.edge_fleet.count >= 1 && coalesce(var.edge_fleet.max_count, var.edge_fleet.count) >= var.edge_fleet.count
    error_message = "edge_fleet.count is at least 1 and max_count, when set, at least count."
  }
}

variable "slicer_fleet" {
  description = "slicer machines: one leads each room, the others stand by to take over within 2.5 s. At least 2. alternate_instance_types as for the other fleets."
  type = object({
    instance_type            = string
    count                    = number
    max_count                = optional(number)
    alternate_instance_types = optional(list(string), [])
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

variable "gslb_load_balancers" {
  description = "Application load balancers in front of the gslb, each with its own weighted gslb.DOMAIN record. AWS reserves at most 15,000 capacity units (LCU) per load balancer, 375,000 new connections a second: a join surge beyond that needs more of them (docs/operations.md, \"Pre-show checklist\"). Their capacity reservations are requested outside Terraform: the request can take hours, longer than an apply may wait."
  type        = number
  default     = 1
  validation {
    condition     = var.gslb_load_balancers >= 1 && var.gslb_load_balancers <= 5 && floor(var.gslb_load_balancers) == var.gslb_load_balancers
    error_message = "gslb_load_balancers is a whole number from 1 to 5."
  }
}

variable "metrics_cidrs" {
  description = "IPv4 CIDRs of the Prometheus scrapers allowed to reach the gslb's and the slicer's /metrics on the role's port: inside vpc_cidr (a scraper in the event's VPC; the module makes no peering, so another private range could never reach it) or a public range of /16 or narrower (a scraper reaching the machines' public addresses). Never the internet."
  type        = list(string)
  default     = []
  validation {
    condition     = alltrue([for c in var.metrics_cidrs : can(cidrhost(c, 0)) && try(tonumber(split("/", c)[1]) >= 8, false)])
    error_message = "metrics_cidrs holds IPv4 CIDRs of /8 or narrower: /metrics is never public."
  }
}

variable "node_unhealthy_after_seconds" {
  description = "How long an ingest, edge or slicer machine's role may fail its /healthz (or not run) before the machine reports itself unhealthy and its auto scaling group replaces it. Long enough to ride out a Redis failover (a restarting role waits for Redis), short enough that a dead role does not hold its share of the audience for long."
  type        = number
  default     = 120
  validation {
    condition     = var.node_unhealthy_after_seconds >= 30 && var.node_unhealthy_after_seconds <= 3600 && floor(var.node_unhealthy_after_seconds) == var.node_unhealthy_after_seconds
    error_message = "node_unhealthy_after_seconds is a whole number from 30 to 3600."
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

variable "edge_max_conns" {
  description = "WebSocket connections each edge holds at most (-max-conns), reported to the gslb as its capacity: it hands an edge out by headroom and skips it at 95 %. Null: derived from the edge instance type (main.tf, local.capacity: CPU per delivery binds, memory is checked), which README.md's sizing explains; set it when a load test on the instance type measured better."
  type        = number
  default     = null
  validation {
    condition     = var.edge_max_conns == null || try(var.edge_max_conns >= 100 && floor(var.edge_max_conns) == var.edge_max_conns, false)
    error_message = "edge_max_conns is a whole number, at least 100 (or null)."
  }
}

variable "ingest_capacity" {
  description = "In-flight requests each ingest is sized for (-ingest-capacity), reported to the gslb as its capacity. Null: derived from the ingest instance type (main.tf, local.capacity: measured posts a second per vCPU × the seconds a comment waits for its room's flush)."
  type        = number
  default     = null
  validation {
    condition     = var.ingest_capacity == null || try(var.ingest_capacity >= 10 && floor(var.ingest_capacity) == var.ingest_capacity, false)
    error_message = "ingest_capacity is a whole number, at least 10 (or null)."
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
# Audit trail
# ---------------------------------------------------------------------------

variable "audit_retention_days" {
  description = "Days the audit trail (every comment's decision, docs/operations.md \"Audit trail\") is kept: the audit bucket's lifecycle rule expires objects after it, and the ingest's own sweep (DANMAKU_AUDIT_RETENTION) deletes what is older."
  type        = number
  default     = 30
  validation {
    condition     = var.audit_retention_days >= 1 && var.audit_retention_days <= 3650 && floor(var.audit_retention_days) == var.audit_retention_days
    error_message = "audit_retention_days is a whole number of days from 1 to 3650."
  }
}

variable "force_destroy_audit_bucket" {
  description = "Let `terraform destroy` delete the audit bucket while it still holds records (otherwise they stay until the retention has passed and the bucket is emptied)."
  type        = bool
  default     = false
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

variable "redis_maintenance_window" {
  description = "Weekly window (UTC) in which ElastiCache may patch and restart Redis nodes, as ddd:hh24:mi-ddd:hh24:mi (at least 60 minutes), e.g. sun:18:00-sun:19:00. Required: left to AWS it is a random hour, which may fall in the show."
  type        = string
  validation {
    condition     = can(regex("^(mon|tue|wed|thu|fri|sat|sun):([01][0-9]|2[0-3]):[0-5][0-9]-(mon|tue|wed|thu|fri|sat|sun):([01][0-9]|2[0-3]):[0-5][0-9]$", var.redis_maintenance_window))
    error_message = "redis_maintenance_window is ddd:hh24:mi-ddd:hh24:mi in UTC, e.g. sun:18:00-sun:19:00."
  }
}

variable "redis_auto_minor_version_upgrade" {
  description = "Let ElastiCache apply minor engine upgrades by itself in the maintenance window. Off by default: the engine a show runs is the one its rehearsal ran; upgrade by changing redis_engine_version between shows."
  type        = bool
  default     = false
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

variable "ticket_key_previous_secret_arn" {
  description = "During a rotation of the ticket key: an existing Secrets Manager secret holding the previous key (DANMAKU_TICKET_KEY_PREVIOUS); tickets signed with either key verify. Null (the default) outside a rotation; set it back to null once the old tickets have expired (at most the gslb's -ticket-max-lifetime later)."
  type        = string
  default     = null
  validation {
    condition     = var.ticket_key_previous_secret_arn == null || can(regex("^arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:[0-9]{12}:secret:", var.ticket_key_previous_secret_arn))
    error_message = "ticket_key_previous_secret_arn is a Secrets Manager secret ARN, or null."
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
