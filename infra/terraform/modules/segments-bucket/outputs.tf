output "id" {
  description = "Bucket name."
  value       = aws_s3_bucket.this.bucket
}

output "arn" {
  description = "Bucket ARN."
  value       = aws_s3_bucket.this.arn
}

output "regional_domain_name" {
  description = "Regional endpoint host name, the CloudFront origin."
  value       = aws_s3_bucket.this.bucket_regional_domain_name
}

output "policy" {
  description = "The bucket policy as applied (JSON)."
  value       = aws_s3_bucket_policy.this.policy
}

# What the bucket's controls say, for the callers' tests (terraform test
# cannot look inside a module): null or false without aws_controls.

output "expiration_days" {
  description = "Days after which the lifecycle rule deletes objects."
  value       = try(one(one(aws_s3_bucket_lifecycle_configuration.this[0].rule).expiration).days, null)
}

output "public_access_blocked" {
  description = "Whether every public access setting is blocked."
  value = try(alltrue([
    aws_s3_bucket_public_access_block.this[0].block_public_acls,
    aws_s3_bucket_public_access_block.this[0].block_public_policy,
    aws_s3_bucket_public_access_block.this[0].ignore_public_acls,
    aws_s3_bucket_public_access_block.this[0].restrict_public_buckets,
  ]), false)
}

output "sse_algorithm" {
  description = "Default server-side encryption of new objects."
  value       = try(one(one(aws_s3_bucket_server_side_encryption_configuration.this[0].rule).apply_server_side_encryption_by_default).sse_algorithm, null)
}
