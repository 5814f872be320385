# The bucket the slicer writes segments and manifests to, readable only by
# one CloudFront distribution; without a distribution, a private bucket
# (the audit trail's, audit.tf).
#
# A submodule of its own so that a test can apply exactly these resources to
# an S3-compatible server (testdata/s3-compat, versitygw): the bucket, its
# ownership controls and its policy go through the same provider code as on
# AWS. The controls such servers answer 501 NotImplemented to sit behind
# var.aws_controls.

terraform {
  required_version = ">= 1.7"
  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = "~> 5.100"
    }
  }
}

resource "aws_s3_bucket" "this" {
  bucket        = var.name
  force_destroy = var.force_destroy
  tags          = var.tags
}

# ACLs off: access is decided by the policy alone, and every object belongs to
# the bucket owner whoever wrote it.
resource "aws_s3_bucket_ownership_controls" "this" {
  bucket = aws_s3_bucket.this.id
  rule {
    object_ownership = "BucketOwnerEnforced"
  }
}

# Segments are written once with If-None-Match: * and never change, and the
# manifest only moves forward under If-Match: old versions would be cost
# without a reader. "Disabled" is only valid on a bucket that was never
# versioned, which this one, created here, is.
resource "aws_s3_bucket_versioning" "this" {
  bucket = aws_s3_bucket.this.id
  versioning_configuration {
    status = "Disabled"
  }
}

resource "aws_s3_bucket_public_access_block" "this" {
  count                   = var.aws_controls ? 1 : 0
  bucket                  = aws_s3_bucket.this.id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

# SSE-S3 rather than SSE-KMS: CloudFront's origin access control then reads
# objects with no key policy to keep in step, and origin GETs cost no KMS
# requests. Nothing here is confidential past the live show; the encryption
# is for at-rest hygiene.
resource "aws_s3_bucket_server_side_encryption_configuration" "this" {
  count  = var.aws_controls ? 1 : 0
  bucket = aws_s3_bucket.this.id
  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm = "AES256"
    }
    bucket_key_enabled = true
  }
}

resource "aws_s3_bucket_lifecycle_configuration" "this" {
  count  = var.aws_controls ? 1 : 0
  bucket = aws_s3_bucket.this.id
  rule {
    id     = "expire-segments"
    status = "Enabled"
    filter {
      prefix = var.prefix
    }
    expiration {
      days = var.expiration_days
    }
    abort_incomplete_multipart_upload {
      days_after_initiation = 1
    }
  }
}

locals {
  # Reads are limited to the prefix the slicer writes under; listing must be
  # granted on the bucket itself, or S3 answers 403 instead of 404 for a key
  # not written yet, and a CDN would cache that 403 as if it were final.
  policy_statements = [for s in [
    {
      when = var.cloudfront_distribution_arn != null
      statement = {
        Sid       = "CloudFrontReadsSegments"
        Effect    = "Allow"
        Principal = { Service = "cloudfront.amazonaws.com" }
        Action    = "s3:GetObject"
        Resource  = "${aws_s3_bucket.this.arn}/${var.prefix}*"
        Condition = { StringEquals = { "AWS:SourceArn" = var.cloudfront_distribution_arn } }
      }
    },
    {
      when = var.cloudfront_distribution_arn != null
      statement = {
        Sid       = "CloudFrontSeesMissingKeysAs404"
        Effect    = "Allow"
        Principal = { Service = "cloudfront.amazonaws.com" }
        Action    = "s3:ListBucket"
        Resource  = aws_s3_bucket.this.arn
        Condition = { StringEquals = { "AWS:SourceArn" = var.cloudfront_distribution_arn } }
      }
    },
    {
      when = var.require_tls
      statement = {
        Sid       = "DenyPlainHTTP"
        Effect    = "Deny"
        Principal = "*"
        Action    = "s3:*"
        Resource  = [aws_s3_bucket.this.arn, "${aws_s3_bucket.this.arn}/*"]
        Condition = { Bool = { "aws:SecureTransport" = "false" } }
      }
    },
  ] : s.statement if s.when]
}

resource "aws_s3_bucket_policy" "this" {
  bucket = aws_s3_bucket.this.id
  policy = jsonencode({
    Version   = "2012-10-17"
    Statement = local.policy_statements
  })
  # With the public access block in place first, a policy that S3 judged
  # public would be refused instead of silently exposing the bucket.
  depends_on = [aws_s3_bucket_public_access_block.this]
}
