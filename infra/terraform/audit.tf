# The audit trail: every comment's decision (docs/operations.md, "Audit
# trail"), written by the ingest and the slicer to a bucket of its own and
# kept audit_retention_days. Never the segments bucket: the CDN serves that
# one, and the trail names users and what they wrote.
#
# The segments bucket's module, without a CloudFront reader: private (public
# access blocked, ACLs off, TLS only), SSE-S3, unversioned (an audit object
# is written once), and a lifecycle rule expiring the whole bucket after
# the retention. The ingest also sweeps it on the same retention
# (DANMAKU_AUDIT_RETENTION); the rule holds it to that even with no ingest
# running.
module "audit_bucket" {
  source = "./modules/segments-bucket"

  name            = "${local.name}-audit-${local.account}"
  prefix          = ""
  expiration_days = var.audit_retention_days
  force_destroy   = var.force_destroy_audit_bucket
}

locals {
  # Every audit key starts with audit/ (internal/audit) under the store's
  # prefix, which the module does not set.
  audit_objects_arn = "${module.audit_bucket.arn}/audit/*"
}
