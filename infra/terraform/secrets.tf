# Every secret a role needs, one Secrets Manager secret per value, each
# readable only by the roles that use it (iam.tf). Machines read them when
# the role starts (compute.tf) and keep them in the process environment
# only; no secret is a Terraform variable, an output or part of user data.
#
# The values this module generates do pass through its state: ElastiCache
# takes user passwords in the clear, and Terraform keeps what it sent. Keep
# the state in an encrypted backend that only the event's operators can read
# (README.md).

locals {
  secrets = merge(
    {
      # Whoever holds the master key runs an auth center: the gslb only.
      master-key    = { env = "DANMAKU_MASTER_KEY", roles = ["gslb"], external = null, hex = true }
      ticket-key    = { env = "DANMAKU_TICKET_KEY", roles = ["gslb"], external = var.ticket_key_secret_arn, hex = false }
      operator-keys = { env = "DANMAKU_OPERATOR_KEYS", roles = ["gslb", "ingest", "slicer"], external = null, hex = false }
      gift-keys     = { env = "DANMAKU_GIFT_KEYS", roles = ["ingest"], external = var.gift_keys_secret_arn, hex = false }
      announce-keys = { env = "DANMAKU_ANNOUNCE_KEYS", roles = ["ingest"], external = var.announce_keys_secret_arn, hex = false }
    },
    { for r in local.roles : "redis-${r}" => { env = "DANMAKU_REDIS_PASSWORD", roles = [r], external = null, hex = false } },
    # During a rotation of the login service's key, the old key verifies
    # too (the gslb accepts tickets signed with either). Absent otherwise:
    # no secret is generated for it, since only the business has the key.
    var.ticket_key_previous_secret_arn == null ? {} : {
      ticket-key-previous = { env = "DANMAKU_TICKET_KEY_PREVIOUS", roles = ["gslb"], external = var.ticket_key_previous_secret_arn, hex = false }
    },
  )
  owned_secrets = { for k, s in local.secrets : k => s if s.external == null }

  # Generated values: the owned secrets, and the password of the disabled
  # "default" Redis user, which nobody needs to read.
  generated = merge(
    { for k, s in local.owned_secrets : k => { hex = s.hex } },
    { redis-default = { hex = false } },
  )

  secret_arn = {
    for k, s in local.secrets : k => s.external != null ? s.external : aws_secretsmanager_secret.owned[k].arn
  }
  # role => { ENV_VAR => secret ARN }: what a machine of the role fetches.
  role_secret_env = {
    for r in local.roles : r => { for k, s in local.secrets : s.env => local.secret_arn[k] if contains(s.roles, r) }
  }
  role_secret_arns = { for r in local.roles : r => sort(values(local.role_secret_env[r])) }
}

# Secrets Manager draws the random values: no extra provider, nothing
# generated on an operator's laptop. 0-9a-f only for the master key, which
# the roles read as hex (32 bytes).
data "aws_secretsmanager_random_password" "generated" {
  for_each            = local.generated
  password_length     = each.value.hex ? 64 : 48
  exclude_punctuation = true
  exclude_uppercase   = each.value.hex
  exclude_characters  = each.value.hex ? "ghijklmnopqrstuvwxyz" : null
}

# The data source draws a new value on every plan; this keeps the first one
# until secret_generation changes. The provider does not mark the value
# sensitive: without sensitive() every plan would print it.
resource "terraform_data" "generated" {
  for_each         = local.generated
  input            = sensitive(data.aws_secretsmanager_random_password.generated[each.key].random_password)
  triggers_replace = [var.secret_generation]
  lifecycle {
    ignore_changes = [input]
  }
}

resource "aws_secretsmanager_secret" "owned" {
  for_each                = local.owned_secrets
  name                    = "danmaku/${var.event}/${each.key}"
  description             = "${each.value.env} for danmaku ${join(", ", each.value.roles)} (event ${var.event})"
  recovery_window_in_days = var.secret_recovery_days
}

resource "aws_secretsmanager_secret_version" "owned" {
  for_each      = local.owned_secrets
  secret_id     = aws_secretsmanager_secret.owned[each.key].id
  secret_string = terraform_data.generated[each.key].output
}
