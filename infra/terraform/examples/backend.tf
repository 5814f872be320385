# Remote state for an event, with locking. Copy this file next to the
# module's own files (infra/terraform/backend.tf) — or into the root module
# that calls this one — before the first `terraform init`:
#
#   cp examples/backend.tf backend.tf
#   terraform init -backend-config="key=danmaku/concert-2025-tokyo.tfstate"
#
# One key per event. The state holds the secrets the module generates
# (ElastiCache takes passwords in the clear): the bucket must be private,
# versioned (an older state can be restored) and readable by the event's
# operators only; kms_key_id encrypts the state with a key whose policy
# names them. use_lockfile (Terraform 1.10 or later) locks the state with a
# .tflock object beside it: two operators applying at once get a lock
# error, not a corrupted state. With an older Terraform, lock with a
# DynamoDB table instead (dynamodb_table = "terraform-locks", a table with
# the string hash key LockID).
terraform {
  backend "s3" {
    bucket       = "example-terraform-state"
    region       = "ap-northeast-1"
    encrypt      = true
    kms_key_id   = "arn:aws:kms:ap-northeast-1:123456789012:key/00000000-0000-0000-0000-000000000000"
    use_lockfile = true
  }
}
