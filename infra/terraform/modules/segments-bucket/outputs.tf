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
