# One instance role per role. Each may read its own secrets and the release
# binary (one object, when downloaded at boot); the slicer alone touches the
# segments bucket, and only under its prefix, without delete; the ingest and
# the slicer alone write the audit trail; edges and ingest nodes may only
# publish their own kind of DNS name; a machine that checks its own health
# may only mark itself, in its own group. The policies are plain JSON
# (jsonencode) so that the tests in tests/ can read them back.

locals {
  # Who may assume each kind of role: the machines (EC2), the node-name
  # cleaner (SSM Automation) and what starts it (EventBridge), the last two
  # only on this account's behalf.
  service_trust = {
    for svc in ["ec2", "ssm", "events"] : svc => jsonencode({
      Version = "2012-10-17"
      Statement = [merge(
        { Effect = "Allow", Principal = { Service = "${svc}.amazonaws.com" }, Action = "sts:AssumeRole" },
        svc == "ec2" ? {} : { Condition = { StringEquals = { "aws:SourceAccount" = local.account } } },
      )]
    })
  }

  # The roles that write the audit trail.
  audit_roles = ["ingest", "slicer"]

  release_object_arn = var.release_s3_uri == null ? null : "arn:${local.partition}:s3:::${trimprefix(var.release_s3_uri, "s3://")}"

  # Everything the slicer writes lives under rooms/ (sdk/wire): the
  # segments and each room's manifest.
  slicer_object_arn = "${module.segments_bucket.arn}/${var.s3_prefix}rooms/*"

  # Candidate statements, each with the condition under which a role gets
  # it; a role's policy is the ones that apply.
  role_statements = {
    for r in local.roles : r => [for s in [
      {
        when = true
        statement = {
          Sid      = "ReadOwnSecrets"
          Effect   = "Allow"
          Action   = "secretsmanager:GetSecretValue"
          Resource = concat(local.role_secret_arns[r], contains(local.public_roles, r) && local.node_tls ? [var.node_tls_secret_arn] : [])
        }
      },
      {
        when = length(var.secrets_kms_key_arns) > 0
        statement = {
          Sid       = "DecryptOwnSecrets"
          Effect    = "Allow"
          Action    = "kms:Decrypt"
          Resource  = var.secrets_kms_key_arns
          Condition = { StringEquals = { "kms:ViaService" = "secretsmanager.${var.region}.amazonaws.com" } }
        }
      },
      {
        # The one object outside the event's resources any role may read,
        # read-only: the binary it runs. None with a baked AMI.
        when = var.release_s3_uri != null
        statement = {
          Sid      = "ReadRelease"
          Effect   = "Allow"
          Action   = "s3:GetObject"
          Resource = local.release_object_arn
        }
      },
      {
        # GetObject: the manifest and a predecessor's segments on takeover.
        # PutObject covers the conditional writes (If-None-Match, If-Match).
        # No DeleteObject: a written segment is final.
        when = r == "slicer"
        statement = {
          Sid      = "WriteSegments"
          Effect   = "Allow"
          Action   = ["s3:GetObject", "s3:PutObject"]
          Resource = local.slicer_object_arn
        }
      },
      {
        # Without ListBucket, S3 answers 403 for a key not written yet
        # instead of 404, and the slicer could not tell "no manifest yet"
        # from a refusal. A condition on s3:prefix would not help: a GET
        # carries no prefix, so S3 would judge the permission absent. The
        # bucket is this event's and holds nothing but its segments.
        when = r == "slicer"
        statement = {
          Sid      = "MissingKeysAre404"
          Effect   = "Allow"
          Action   = "s3:ListBucket"
          Resource = module.segments_bucket.arn
        }
      },
      {
        # Audit objects are written once (If-None-Match) under audit/.
        when = contains(local.audit_roles, r)
        statement = {
          Sid      = "WriteAudit"
          Effect   = "Allow"
          Action   = "s3:PutObject"
          Resource = local.audit_objects_arn
        }
      },
      {
        # The retention sweep (internal/audit): every recorder lists the
        # trail room by room and deletes the minutes past the retention —
        # the ingest's and, as the code stands, the slicer's too (its
        # recorder sweeps with the same default). Listing only under audit/.
        when = contains(local.audit_roles, r)
        statement = {
          Sid       = "SweepAuditList"
          Effect    = "Allow"
          Action    = "s3:ListBucket"
          Resource  = module.audit_bucket.arn
          Condition = { StringLike = { "s3:prefix" = ["audit/*"] } }
        }
      },
      {
        when = contains(local.audit_roles, r)
        statement = {
          Sid      = "SweepAuditDelete"
          Effect   = "Allow"
          Action   = "s3:DeleteObject"
          Resource = local.audit_objects_arn
        }
      },
      {
        # danmaku-health (node-boot.sh): the machine reports itself
        # unhealthy once its role has failed for too long; only its own
        # group's machines can be named.
        when = local.self_health[r]
        statement = {
          Sid      = "ReportOwnHealth"
          Effect   = "Allow"
          Action   = "autoscaling:SetInstanceHealth"
          Resource = "arn:${local.partition}:autoscaling:${var.region}:${local.account}:autoScalingGroup:*:autoScalingGroupName/${local.asg_name[r]}"
        }
      },
      {
        when = contains(local.public_roles, r)
        statement = {
          Sid      = "PublishOwnNodeName"
          Effect   = "Allow"
          Action   = "route53:ChangeResourceRecordSets"
          Resource = "arn:${local.partition}:route53:::hostedzone/${var.dns_zone_id}"
          Condition = {
            "ForAllValues:StringLike" = {
              "route53:ChangeResourceRecordSetsNormalizedRecordNames" = ["${lookup(local.node_name_prefix, r, "")}-*.${local.node_domain}"]
            }
            "ForAllValues:StringEquals" = {
              "route53:ChangeResourceRecordSetsRecordTypes" = ["A"]
              "route53:ChangeResourceRecordSetsActions"     = ["UPSERT", "DELETE"]
            }
          }
        }
      },
      {
        # The boot script waits until its name resolves everywhere before
        # the role reports itself to the gslb: a client handed a name that
        # does not resolve yet would cache the NXDOMAIN.
        when = contains(local.public_roles, r)
        statement = {
          Sid      = "WaitForNodeName"
          Effect   = "Allow"
          Action   = "route53:GetChange"
          Resource = "arn:${local.partition}:route53:::change/*"
        }
      },
    ] : s.statement if s.when]
  }
}

resource "aws_iam_role" "role" {
  for_each           = toset(local.roles)
  name               = "${local.name}-${each.key}"
  description        = "danmaku ${each.key} machines of event ${var.event}"
  assume_role_policy = local.service_trust.ec2
}

resource "aws_iam_role_policy" "role" {
  for_each = toset(local.roles)
  name     = "danmaku-${each.key}"
  role     = aws_iam_role.role[each.key].id
  policy = jsonencode({
    Version   = "2012-10-17"
    Statement = local.role_statements[each.key]
  })
}

resource "aws_iam_role_policy_attachment" "ssm" {
  for_each   = var.enable_ssm ? toset(local.roles) : toset([])
  role       = aws_iam_role.role[each.key].name
  policy_arn = "arn:${local.partition}:iam::aws:policy/AmazonSSMManagedInstanceCore"
}

resource "aws_iam_instance_profile" "role" {
  for_each = toset(local.roles)
  name     = "${local.name}-${each.key}"
  role     = aws_iam_role.role[each.key].name
}
