# A node name never outlives its machine.
#
# Edge and ingest machines publish e-INSTANCE.nodes.DOMAIN and
# i-INSTANCE.nodes.DOMAIN themselves at boot and delete them at a clean
# shutdown (node-boot.sh). A machine that dies, is replaced as unhealthy,
# is terminated from the console or by `terraform destroy` may never run its
# shutdown: its record would point at an address AWS hands to somebody else.
# So EC2's own event that an instance is shutting down or stopping starts an
# SSM Automation that deletes that instance's names (node-records.py).
#
# Why this mechanism: EC2 sends the event for every way an instance goes
# (an auto scaling group's lifecycle hooks run only for what the group
# terminates), and names built from the instance id tell the cleaner which
# records are the machine's without asking where it was; an Elastic IP
# pool would have needed an EIP quota of ~250 and a claim protocol at boot.
# SSM Automation runs the Python inline: no package to build, no provider
# beyond aws. EventBridge cannot filter EC2's event by tag, so every
# instance of the account and region that stops starts one short execution;
# most find no name and end.
#
# The compute groups depend on these resources, so `terraform destroy`
# empties the groups (and the names go) before removing them.

locals {
  # The TTL every node record is published with (node-boot.sh).
  node_record_ttl = 60
  # The names of every public role: what the cleaner may delete.
  node_record_patterns = [for r in local.public_roles : "${local.node_name_prefix[r]}-*.${local.node_domain}"]
}

resource "aws_ssm_document" "node_records" {
  name            = "${local.name}-node-records"
  document_type   = "Automation"
  document_format = "JSON"
  content = jsonencode({
    schemaVersion = "0.3"
    description   = "danmaku ${var.event}: delete the node names of an instance that is going away"
    assumeRole    = aws_iam_role.node_records.arn
    parameters = {
      InstanceId = {
        type           = "String"
        description    = "The instance that is shutting down or stopping."
        allowedPattern = "^i-[0-9a-f]{8,17}$"
      }
    }
    mainSteps = [{
      name           = "DeleteNodeRecords"
      action         = "aws:executeScript"
      timeoutSeconds = 120
      inputs = {
        Runtime = "python3.11"
        Handler = "handler"
        Script  = file("${path.module}/node-records.py")
        InputPayload = {
          InstanceId = "{{ InstanceId }}"
          ZoneId     = var.dns_zone_id
          Domain     = local.node_domain
          Prefixes   = [for r in local.public_roles : local.node_name_prefix[r]]
        }
      }
      outputs = [{ Name = "Deleted", Selector = "$.Payload.deleted", Type = "StringList" }]
    }]
  })
}

resource "aws_cloudwatch_event_rule" "node_records" {
  name        = "${local.name}-node-records"
  description = "danmaku ${var.event}: an instance shutting down or stopping loses its node names"
  event_pattern = jsonencode({
    source        = ["aws.ec2"]
    "detail-type" = ["EC2 Instance State-change Notification"]
    detail        = { state = ["shutting-down", "stopping"] }
  })
}

resource "aws_cloudwatch_event_target" "node_records" {
  rule     = aws_cloudwatch_event_rule.node_records.name
  arn      = "arn:${local.partition}:ssm:${var.region}:${local.account}:automation-definition/${aws_ssm_document.node_records.name}:$DEFAULT"
  role_arn = aws_iam_role.node_records_start.arn
  input_transformer {
    input_paths    = { instance = "$.detail.instance-id" }
    input_template = "{\"InstanceId\":[\"<instance>\"]}"
  }
  # A throttled start (Route 53 or SSM limits while a whole fleet goes) is
  # retried for an hour.
  retry_policy {
    maximum_event_age_in_seconds = 3600
    maximum_retry_attempts       = 50
  }
}

# The automation's own role: list the zone, delete node names (A records
# under nodes.DOMAIN with a node prefix), nothing else.
resource "aws_iam_role" "node_records" {
  name               = "${local.name}-node-records"
  description        = "danmaku ${var.event}: deletes the node names of machines that go"
  assume_role_policy = local.service_trust.ssm
}

resource "aws_iam_role_policy" "node_records" {
  name = "danmaku-node-records"
  role = aws_iam_role.node_records.id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [
      {
        Sid      = "FindNodeNames"
        Effect   = "Allow"
        Action   = "route53:ListResourceRecordSets"
        Resource = "arn:${local.partition}:route53:::hostedzone/${var.dns_zone_id}"
      },
      {
        Sid      = "DeleteNodeNames"
        Effect   = "Allow"
        Action   = "route53:ChangeResourceRecordSets"
        Resource = "arn:${local.partition}:route53:::hostedzone/${var.dns_zone_id}"
        Condition = {
          "ForAllValues:StringLike" = {
            "route53:ChangeResourceRecordSetsNormalizedRecordNames" = local.node_record_patterns
          }
          "ForAllValues:StringEquals" = {
            "route53:ChangeResourceRecordSetsRecordTypes" = ["A"]
            "route53:ChangeResourceRecordSetsActions"     = ["DELETE"]
          }
        }
      },
    ]
  })
}

# EventBridge's role: start this one automation, as the role above.
resource "aws_iam_role" "node_records_start" {
  name               = "${local.name}-node-records-start"
  description        = "danmaku ${var.event}: EventBridge starts the node-name cleaner"
  assume_role_policy = local.service_trust.events
}

resource "aws_iam_role_policy" "node_records_start" {
  name = "danmaku-node-records-start"
  role = aws_iam_role.node_records_start.id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [
      {
        Sid      = "StartCleaner"
        Effect   = "Allow"
        Action   = "ssm:StartAutomationExecution"
        Resource = "arn:${local.partition}:ssm:${var.region}:${local.account}:automation-definition/${aws_ssm_document.node_records.name}:*"
      },
      {
        Sid       = "RunCleanerAsItsRole"
        Effect    = "Allow"
        Action    = "iam:PassRole"
        Resource  = aws_iam_role.node_records.arn
        Condition = { StringEquals = { "iam:PassedToService" = "ssm.amazonaws.com" } }
      },
    ]
  })
}
