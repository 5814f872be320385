# Observability on AWS: the Prometheus workspace with the repository's rule
# files, alerts routed to SNS, the metrics writer role (remote write to this
# workspace only, assumable by the event's machines only), the role log
# groups and their retention, Managed Grafana reading the workspace.

mock_provider "aws" {
  source = "./tests/mocks"

  mock_resource "aws_prometheus_workspace" {
    defaults = {
      id                  = "ws-0123abcd-4567-89ef-0123-456789abcdef"
      arn                 = "arn:aws:aps:us-east-1:123456789012:workspace/ws-0123abcd-4567-89ef-0123-456789abcdef"
      prometheus_endpoint = "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-0123abcd-4567-89ef-0123-456789abcdef/"
    }
  }
  mock_resource "aws_grafana_workspace" {
    defaults = {
      endpoint = "g-0123456789.grafana-workspace.us-east-1.amazonaws.com"
    }
  }
}

variables {
  event                    = "test"
  region                   = "us-east-1"
  availability_zones       = ["us-east-1a", "us-east-1b", "us-east-1c"]
  domain                   = "test.live.example.com"
  dns_zone_id              = "Z0123456789EXAMPLE"
  gslb_certificate_arn     = "arn:aws:acm:us-east-1:123456789012:certificate/00000000-0000-0000-0000-000000000001"
  ticket_key_secret_arn    = "arn:aws:secretsmanager:us-east-1:123456789012:secret:login/ticket-key-AbCdEf"
  release_s3_uri           = "s3://artifacts-example/danmaku/v1/danmaku-linux-amd64"
  ami_id                   = "ami-0123456789abcdef0"
  redis_maintenance_window = "sun:18:00-sun:19:00"
  cors_origins             = ["https://app.example.com"]
  gslb_fleet               = { instance_type = "c7i.large", count = 2 }
  ingest_fleet             = { instance_type = "c6in.large", count = 2 }
  edge_fleet               = { instance_type = "c6in.large", count = 2 }
}

run "workspace_rules_alerts_logs" {
  command = apply

  variables {
    observability_alerts_sns_topic_arn             = "arn:aws:sns:us-east-1:123456789012:oncall-concerts"
    observability_log_retention_days               = 14
    observability_agent_s3_uri                     = "s3://artifacts-example/prometheus/v3/prometheus-linux-amd64"
    observability_agent_sha256                     = "0000000000000000000000000000000000000000000000000000000000000000"
    observability_grafana_authentication_providers = ["AWS_SSO"]
  }

  # --- the workspace and the repository's rules ------------------------------
  assert {
    condition     = aws_prometheus_workspace.this.alias == "danmaku-test"
    error_message = "One Prometheus workspace per event, named after it."
  }
  assert {
    condition     = aws_prometheus_workspace.this.logging_configuration[0].log_group_arn == "arn:aws:logs:us-east-1:123456789012:log-group:/aws/vendedlogs/prometheus/danmaku-test:*"
    error_message = "The workspace logs its rule and alert manager errors to a log group of the module's."
  }
  assert {
    condition     = toset(keys(aws_prometheus_rule_group_namespace.danmaku)) == toset([for f in fileset("${path.module}/../observability/rules", "*.yml") : f]) && length(aws_prometheus_rule_group_namespace.danmaku) >= 2
    error_message = "One rule group namespace per rule file of infra/observability/rules."
  }
  assert {
    condition = alltrue([for f, ns in aws_prometheus_rule_group_namespace.danmaku :
      ns.data == file("${path.module}/../observability/rules/${f}") && ns.workspace_id == aws_prometheus_workspace.this.id
    ])
    error_message = "Each namespace holds its repository file as it is (the file promtool tests), in the event's workspace."
  }
  assert {
    condition     = strcontains(aws_prometheus_rule_group_namespace.danmaku["danmaku.alerts.yml"].data, "alert: DanmakuRoomWithoutLeader") && strcontains(aws_prometheus_rule_group_namespace.danmaku["danmaku.rules.yml"].data, "record: danmaku:first_poll_hit:ratio_5m")
    error_message = "The alert and recording rules reach the workspace."
  }

  # --- alerts to the given SNS topic -------------------------------------------
  assert {
    condition     = strcontains(aws_prometheus_alert_manager_definition.this.definition, "topic_arn: arn:aws:sns:us-east-1:123456789012:oncall-concerts") && strcontains(aws_prometheus_alert_manager_definition.this.definition, "region: us-east-1")
    error_message = "The alert manager publishes to the topic given, signing with SigV4 in the event's region."
  }
  assert {
    condition     = length(aws_sns_topic.alerts) == 0 && length(aws_sns_topic_policy.alerts) == 0 && output.observability.alerts_sns_topic_arn == var.observability_alerts_sns_topic_arn
    error_message = "A topic given is used as it is: the module creates none and changes no policy of it."
  }
  assert {
    condition     = can(yamldecode(yamldecode(aws_prometheus_alert_manager_definition.this.definition).alertmanager_config).route.receiver)
    error_message = "The alert manager definition is YAML holding an alertmanager_config with a route."
  }

  # --- the metrics writer: its own role, this workspace only --------------------
  assert {
    condition = jsondecode(aws_iam_role_policy.metrics_writer.policy).Statement == [{
      Sid      = "RemoteWriteThisWorkspace"
      Effect   = "Allow"
      Action   = "aps:RemoteWrite"
      Resource = aws_prometheus_workspace.this.arn
    }]
    error_message = "The metrics writer may remote-write to the event's workspace and do nothing else."
  }
  assert {
    condition = toset(flatten([for s in jsondecode(aws_iam_role.metrics_writer.assume_role_policy).Statement : [s.Principal.AWS]])) == toset([
      for r in ["gslb", "ingest", "edge", "slicer"] : aws_iam_role.role[r].arn
    ]) && alltrue([for s in jsondecode(aws_iam_role.metrics_writer.assume_role_policy).Statement : s.Action == "sts:AssumeRole" && !can(s.Principal.Service)])
    error_message = "Only the event's four instance roles may assume the metrics writer."
  }
  assert {
    condition = alltrue([for r in ["gslb", "ingest", "edge", "slicer"] :
      toset(flatten([for s in jsondecode(aws_iam_role_policy.observability[r].policy).Statement : s.Action])) == toset([
        "sts:AssumeRole", "logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams", "s3:GetObject",
      ])
    ])
    error_message = "A machine may assume the writer, write its log and read the agent binary: nothing more."
  }
  assert {
    condition = alltrue([for r in ["gslb", "ingest", "edge", "slicer"] : [
      for s in jsondecode(aws_iam_role_policy.observability[r].policy).Statement : s.Resource if s.Sid == "ShipOwnLog"
    ] == ["arn:aws:logs:us-east-1:123456789012:log-group:/danmaku/test/${r}:*"]])
    error_message = "Each role writes its own log group only."
  }
  assert {
    condition = alltrue([for r in ["gslb", "ingest", "edge", "slicer"] : [
      for s in jsondecode(aws_iam_role_policy.observability[r].policy).Statement : s.Resource if s.Sid == "AssumeMetricsWriter" || s.Sid == "ReadMetricsAgent"
    ] == [aws_iam_role.metrics_writer.arn, "arn:aws:s3:::artifacts-example/prometheus/v3/prometheus-linux-amd64"]])
    error_message = "The writer role and the one agent object, by ARN: no wildcard."
  }
  assert {
    condition = alltrue([for r in ["gslb", "ingest", "edge", "slicer"] : alltrue([
      for a in flatten([for s in jsondecode(aws_iam_role_policy.observability[r].policy).Statement : s.Action]) : !strcontains(a, "*")
    ]) && aws_iam_role_policy.observability[r].role == aws_iam_role.role[r].id])
    error_message = "No wildcard action; each policy is on its own role's instance role."
  }

  # --- logs ----------------------------------------------------------------------
  assert {
    condition = {
      for r, g in aws_cloudwatch_log_group.role : r => [g.name, g.retention_in_days]
      } == {
      gslb   = ["/danmaku/test/gslb", 14]
      ingest = ["/danmaku/test/ingest", 14]
      edge   = ["/danmaku/test/edge", 14]
      slicer = ["/danmaku/test/slicer", 14]
    }
    error_message = "One log group per role, kept for observability_log_retention_days."
  }
  assert {
    condition     = aws_cloudwatch_log_group.prometheus.retention_in_days == 14
    error_message = "The workspace's own log is kept as long."
  }

  # --- Grafana -------------------------------------------------------------------
  assert {
    condition     = length(aws_grafana_workspace.this) == 1 && aws_grafana_workspace.this[0].data_sources == tolist(["PROMETHEUS"]) && aws_grafana_workspace.this[0].authentication_providers == tolist(["AWS_SSO"]) && aws_grafana_workspace.this[0].role_arn == aws_iam_role.grafana[0].arn
    error_message = "A Managed Grafana workspace with the Prometheus data source and the sign-in given."
  }
  assert {
    condition = jsondecode(aws_iam_role_policy.grafana[0].policy).Statement[0].Resource == aws_prometheus_workspace.this.arn && alltrue([
      for a in jsondecode(aws_iam_role_policy.grafana[0].policy).Statement[0].Action : contains(["aps:QueryMetrics", "aps:GetSeries", "aps:GetLabels", "aps:GetMetricMetadata", "aps:DescribeWorkspace"], a)
    ]) && length(jsondecode(aws_iam_role_policy.grafana[0].policy).Statement) == 1
    error_message = "Grafana reads this workspace and may not write it."
  }
  assert {
    condition     = output.observability.grafana_url == "https://g-0123456789.grafana-workspace.us-east-1.amazonaws.com" && toset(keys(output.observability.dashboards)) == toset(["show", "fleet"])
    error_message = "The outputs name the Grafana workspace and the dashboards to import into it."
  }

  # --- collection on each machine ------------------------------------------------
  assert {
    condition = alltrue([for r, p in { gslb = 7700, ingest = 7711, edge = 7712, slicer = 7704 } :
      strcontains(output.observability_boot[r], "OBS_PORT='${p}'") &&
      strcontains(output.observability_boot[r], "OBS_SCHEME='http'") &&
      strcontains(output.boot_user_data[r], output.observability_boot[r]) &&
      strcontains(output.observability_boot[r], "OBS_ROLE='${r}'") &&
      strcontains(output.observability_boot[r], "OBS_LOG_GROUP='/danmaku/test/${r}'") &&
      strcontains(output.observability_boot[r], "OBS_REMOTE_WRITE_URL='https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-0123abcd-4567-89ef-0123-456789abcdef/api/v1/remote_write'") &&
      strcontains(output.observability_boot[r], "OBS_WRITER_ROLE_ARN='${aws_iam_role.metrics_writer.arn}'") &&
      strcontains(output.observability_boot[r], "sigv4:")
    ])
    error_message = "Each machine's agent scrapes its own role's port and remote-writes with SigV4 as the writer role."
  }
}

run "defaults" {
  command = apply

  assert {
    condition     = length(aws_sns_topic.alerts) == 1 && aws_sns_topic.alerts[0].name == "danmaku-test-alerts" && strcontains(aws_prometheus_alert_manager_definition.this.definition, "topic_arn: arn:aws:sns:us-east-1:123456789012:danmaku-test-alerts")
    error_message = "Without a topic the module creates one, and routes alerts to it."
  }
  assert {
    condition     = jsondecode(aws_sns_topic_policy.alerts[0].policy).Statement[0].Principal.Service == "aps.amazonaws.com" && jsondecode(aws_sns_topic_policy.alerts[0].policy).Statement[0].Condition.ArnEquals["aws:SourceArn"] == aws_prometheus_workspace.this.arn
    error_message = "Only the event's workspace may publish to the topic the module creates."
  }
  assert {
    condition     = alltrue([for g in aws_cloudwatch_log_group.role : g.retention_in_days == 30])
    error_message = "Logs are kept 30 days by default."
  }
  assert {
    condition     = length(aws_grafana_workspace.this) == 0 && length(aws_iam_role.grafana) == 0
    error_message = "No Grafana workspace unless a sign-in provider is given (AWS_SSO needs IAM Identity Center)."
  }
  assert {
    condition     = alltrue([for r in ["gslb", "ingest", "edge", "slicer"] : length(jsondecode(aws_iam_role_policy.observability[r].policy).Statement) == 2])
    error_message = "Without an agent binary, no machine may read one."
  }
}

run "bad_retention" {
  command = plan
  variables {
    observability_log_retention_days = 10
  }
  expect_failures = [var.observability_log_retention_days]
}
