# Observability of the event: Amazon Managed Service for Prometheus with the
# repository's rules (infra/observability/rules, the same files the local
# Prometheus and the rule tests use), alerts routed to SNS, the role logs in
# CloudWatch Logs, optionally Amazon Managed Grafana reading the workspace.
#
# Collection runs on every machine (observability-boot.sh): a Prometheus in
# agent mode scrapes the role on 127.0.0.1 and remote-writes to the
# workspace with SigV4 under an IAM role of its own (metrics_writer), which
# the instance roles may only assume; the CloudWatch agent ships the role's
# log. Nothing scrapes from outside the machine, so metrics_cidrs may stay
# empty. docs/operations.md, "On AWS", says how it fits together.

variable "observability_log_retention_days" {
  description = "Days CloudWatch Logs keeps the roles' logs and the Prometheus workspace's own log."
  type        = number
  default     = 30
  validation {
    condition     = contains([1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653], var.observability_log_retention_days)
    error_message = "observability_log_retention_days is one of CloudWatch Logs' retention periods: 1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288 or 3653."
  }
}

variable "observability_alerts_sns_topic_arn" {
  description = "SNS topic the workspace's alert manager publishes alerts to. Its policy must let aps.amazonaws.com publish (sns:Publish, sns:GetTopicAttributes) for this workspace. Null: the module creates one, <name>-alerts, with that policy; subscribe the on-call to it."
  type        = string
  default     = null
  validation {
    condition     = var.observability_alerts_sns_topic_arn == null || can(regex("^arn:aws[a-z-]*:sns:[a-z0-9-]+:[0-9]{12}:[A-Za-z0-9_-]{1,256}$", var.observability_alerts_sns_topic_arn))
    error_message = "observability_alerts_sns_topic_arn is an SNS topic ARN (arn:aws:sns:REGION:ACCOUNT:NAME)."
  }
}

variable "observability_agent_s3_uri" {
  description = "s3://BUCKET/KEY of a Prometheus server binary (linux, the machines' arch; 2.32 or later, run in agent mode) each machine downloads at boot to remote-write its role's metrics. Null: no metrics collection (logs are still shipped)."
  type        = string
  default     = null
  validation {
    condition     = var.observability_agent_s3_uri == null || can(regex("^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/[^']+$", var.observability_agent_s3_uri))
    error_message = "observability_agent_s3_uri is s3://BUCKET/KEY, without a single quote."
  }
}

variable "observability_agent_sha256" {
  description = "SHA-256 (hex) of the binary at observability_agent_s3_uri; the boot refuses a binary that does not match. Null: not checked."
  type        = string
  default     = null
  validation {
    condition     = var.observability_agent_sha256 == null || can(regex("^[0-9a-f]{64}$", var.observability_agent_sha256))
    error_message = "observability_agent_sha256 is 64 lower-case hex digits."
  }
}

variable "observability_scrape_interval" {
  description = "How often each machine's agent scrapes its role (Prometheus duration)."
  type        = string
  default     = "15s"
  validation {
    condition     = can(regex("^[1-9][0-9]*(s|m)$", var.observability_scrape_interval))
    error_message = "observability_scrape_interval is a whole number of seconds or minutes, such as 15s."
  }
}

variable "observability_grafana_authentication_providers" {
  description = "Creates an Amazon Managed Grafana workspace reading the Prometheus workspace, with these sign-in providers (AWS_SSO needs IAM Identity Center in the account; SAML a SAML configuration after apply). Empty: no Grafana workspace (use your own Grafana with the Prometheus workspace's query URL and SigV4)."
  type        = list(string)
  default     = []
  validation {
    condition     = alltrue([for p in var.observability_grafana_authentication_providers : contains(["AWS_SSO", "SAML"], p)])
    error_message = "observability_grafana_authentication_providers holds AWS_SSO and/or SAML."
  }
}

locals {
  # The repository's rule files: one rule group namespace each, the same
  # files promtool tests and the local Prometheus loads.
  obs_rules_dir  = "${path.module}/../observability/rules"
  obs_rule_files = fileset(local.obs_rules_dir, "*.yml")
  obs_dashboards = { for f in fileset("${path.module}/../observability/dashboards", "*.json") : trimsuffix(f, ".json") => "${path.module}/../observability/dashboards/${f}" }

  obs_account = data.aws_caller_identity.this.account_id
  obs_arn     = "${local.partition}:%s:${var.region}:${local.obs_account}"

  obs_log_group     = { for r in local.roles : r => "/danmaku/${var.event}/${r}" }
  obs_log_group_arn = { for r in local.roles : r => "arn:${format(local.obs_arn, "logs")}:log-group:${local.obs_log_group[r]}" }
  # AMP's own log (rule evaluation and alert manager errors).
  obs_amp_log_group     = "/aws/vendedlogs/prometheus/${local.name}"
  obs_amp_log_group_arn = "arn:${format(local.obs_arn, "logs")}:log-group:${local.obs_amp_log_group}"

  obs_create_topic     = var.observability_alerts_sns_topic_arn == null
  obs_alerts_topic_arn = local.obs_create_topic ? "arn:${format(local.obs_arn, "sns")}:${local.name}-alerts" : var.observability_alerts_sns_topic_arn

  obs_remote_write_url = "${aws_prometheus_workspace.this.prometheus_endpoint}api/v1/remote_write"
  obs_agent_object_arn = var.observability_agent_s3_uri == null ? null : "arn:${local.partition}:s3:::${trimprefix(var.observability_agent_s3_uri, "s3://")}"
  obs_grafana          = length(var.observability_grafana_authentication_providers) > 0

  # What every machine's observability-boot.sh runs with.
  obs_boot_settings = {
    for r in local.roles : r => {
      OBS_EVENT  = var.event
      OBS_ROLE   = r
      OBS_REGION = var.region
      # Where the role serves /metrics: plain HTTP on its metrics port,
      # never the edge's or the ingest's public port (443 with node TLS).
      OBS_PORT             = tostring(local.metrics_port[r])
      OBS_SCHEME           = "http"
      OBS_LOG_GROUP        = local.obs_log_group[r]
      OBS_REMOTE_WRITE_URL = local.obs_remote_write_url
      OBS_WRITER_ROLE_ARN  = aws_iam_role.metrics_writer.arn
      OBS_SCRAPE_INTERVAL  = var.observability_scrape_interval
      OBS_AGENT            = var.observability_agent_s3_uri != null ? var.observability_agent_s3_uri : ""
      OBS_AGENT_SHA256     = var.observability_agent_sha256 != null ? var.observability_agent_sha256 : ""
    }
  }
  # The script with its settings, for a machine's user data: run it before
  # node-boot.sh, which starts the role (its log goes to the file the
  # CloudWatch agent tails from the first line on).
  observability_boot = {
    for r in local.roles : r => join("\n", concat(
      [for k in sort(keys(local.obs_boot_settings[r])) : "${k}='${local.obs_boot_settings[r][k]}'"],
      [file("${path.module}/observability-boot.sh")],
    ))
  }
}

# --- logs --------------------------------------------------------------------

resource "aws_cloudwatch_log_group" "role" {
  for_each          = toset(local.roles)
  name              = local.obs_log_group[each.key]
  retention_in_days = var.observability_log_retention_days
}

resource "aws_cloudwatch_log_group" "prometheus" {
  name              = local.obs_amp_log_group
  retention_in_days = var.observability_log_retention_days
}

# --- Amazon Managed Service for Prometheus -------------------------------------

resource "aws_prometheus_workspace" "this" {
  alias = local.name
  logging_configuration {
    log_group_arn = "${local.obs_amp_log_group_arn}:*"
  }
  depends_on = [aws_cloudwatch_log_group.prometheus]
}

resource "aws_prometheus_rule_group_namespace" "danmaku" {
  for_each     = local.obs_rule_files
  name         = trimsuffix(each.key, ".yml")
  workspace_id = aws_prometheus_workspace.this.id
  data         = file("${local.obs_rules_dir}/${each.key}")
}

# --- alerts to SNS ---------------------------------------------------------------

resource "aws_sns_topic" "alerts" {
  count = local.obs_create_topic ? 1 : 0
  name  = "${local.name}-alerts"
}

resource "aws_sns_topic_policy" "alerts" {
  count = local.obs_create_topic ? 1 : 0
  arn   = local.obs_alerts_topic_arn
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Sid       = "WorkspaceAlertManagerPublishes"
      Effect    = "Allow"
      Principal = { Service = "aps.amazonaws.com" }
      Action    = ["sns:Publish", "sns:GetTopicAttributes"]
      Resource  = local.obs_alerts_topic_arn
      Condition = {
        StringEquals = { "aws:SourceAccount" = local.obs_account }
        ArnEquals    = { "aws:SourceArn" = aws_prometheus_workspace.this.arn }
      }
    }]
  })
  depends_on = [aws_sns_topic.alerts]
}

resource "aws_prometheus_alert_manager_definition" "this" {
  workspace_id = aws_prometheus_workspace.this.id
  # Critical alerts repeat every 15 minutes while they fire, warnings every
  # 4 hours; resolved alerts are sent too. The message attributes carry the
  # severity so that subscriptions can filter on it.
  definition = <<-EOT
    alertmanager_config: |
      route:
        receiver: sns
        group_by: [alertname, severity]
        group_wait: 10s
        group_interval: 1m
        repeat_interval: 4h
        routes:
          - receiver: sns
            matchers: ['severity="critical"']
            repeat_interval: 15m
      receivers:
        - name: sns
          sns_configs:
            - topic_arn: ${local.obs_alerts_topic_arn}
              send_resolved: true
              sigv4:
                region: ${var.region}
              subject: '[${var.event}] {{ .Status | toUpper }} {{ .CommonLabels.alertname }}'
              attributes:
                event: ${var.event}
                severity: '{{ .CommonLabels.severity }}'
  EOT
}

# --- metrics collection: an IAM role of its own --------------------------------

# The agents remote-write as this role and nothing else does: it may write
# to this workspace only, and only the event's instance roles may assume it.
resource "aws_iam_role" "metrics_writer" {
  name        = "${local.name}-metrics-writer"
  description = "Remote write of the danmaku machines of event ${var.event} to its Prometheus workspace"
  assume_role_policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Effect    = "Allow"
      Principal = { AWS = [for r in local.roles : aws_iam_role.role[r].arn] }
      Action    = "sts:AssumeRole"
    }]
  })
}

resource "aws_iam_role_policy" "metrics_writer" {
  name = "danmaku-remote-write"
  role = aws_iam_role.metrics_writer.id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Sid      = "RemoteWriteThisWorkspace"
      Effect   = "Allow"
      Action   = "aps:RemoteWrite"
      Resource = aws_prometheus_workspace.this.arn
    }]
  })
}

# What each instance role adds for observability: assume the writer role,
# write its own role's log group, read the agent binary.
resource "aws_iam_role_policy" "observability" {
  for_each = toset(local.roles)
  name     = "danmaku-observability"
  role     = aws_iam_role.role[each.key].id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = concat(
      [
        {
          Sid      = "AssumeMetricsWriter"
          Effect   = "Allow"
          Action   = "sts:AssumeRole"
          Resource = aws_iam_role.metrics_writer.arn
        },
        {
          Sid      = "ShipOwnLog"
          Effect   = "Allow"
          Action   = ["logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"]
          Resource = "${local.obs_log_group_arn[each.key]}:*"
        },
      ],
      local.obs_agent_object_arn == null ? [] : [{
        Sid      = "ReadMetricsAgent"
        Effect   = "Allow"
        Action   = "s3:GetObject"
        Resource = local.obs_agent_object_arn
      }],
    )
  })
}

# --- Amazon Managed Grafana (optional) -------------------------------------------

resource "aws_iam_role" "grafana" {
  count       = local.obs_grafana ? 1 : 0
  name        = "${local.name}-grafana"
  description = "Managed Grafana of event ${var.event}: reads its Prometheus workspace"
  assume_role_policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Effect    = "Allow"
      Principal = { Service = "grafana.amazonaws.com" }
      Action    = "sts:AssumeRole"
      Condition = { StringEquals = { "aws:SourceAccount" = local.obs_account } }
    }]
  })
}

resource "aws_iam_role_policy" "grafana" {
  count = local.obs_grafana ? 1 : 0
  name  = "danmaku-read-metrics"
  role  = aws_iam_role.grafana[0].id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Sid      = "QueryThisWorkspace"
      Effect   = "Allow"
      Action   = ["aps:QueryMetrics", "aps:GetSeries", "aps:GetLabels", "aps:GetMetricMetadata", "aps:DescribeWorkspace"]
      Resource = aws_prometheus_workspace.this.arn
    }]
  })
}

resource "aws_grafana_workspace" "this" {
  count                    = local.obs_grafana ? 1 : 0
  name                     = local.name
  description              = "danmaku event ${var.event}: dashboards of infra/observability/dashboards"
  account_access_type      = "CURRENT_ACCOUNT"
  authentication_providers = var.observability_grafana_authentication_providers
  permission_type          = "CUSTOMER_MANAGED"
  role_arn                 = aws_iam_role.grafana[0].arn
  data_sources             = ["PROMETHEUS"]
}

# --- outputs -------------------------------------------------------------------

output "observability" {
  description = "Where the event's metrics, alerts and logs are: the Prometheus workspace (query URL for Grafana, with SigV4), the alerts topic, the log groups, the Grafana workspace (null without one), and the dashboards to import into it."
  value = {
    prometheus_workspace_id = aws_prometheus_workspace.this.id
    prometheus_query_url    = aws_prometheus_workspace.this.prometheus_endpoint
    remote_write_url        = local.obs_remote_write_url
    metrics_writer_role_arn = aws_iam_role.metrics_writer.arn
    alerts_sns_topic_arn    = local.obs_alerts_topic_arn
    log_groups              = local.obs_log_group
    grafana_url             = local.obs_grafana ? "https://${aws_grafana_workspace.this[0].endpoint}" : null
    dashboards              = local.obs_dashboards
  }
}

output "observability_boot" {
  description = "Per role, the observability boot script with its settings: shell to run on each machine before node-boot.sh (compute.tf's user data)."
  value       = local.observability_boot
}
