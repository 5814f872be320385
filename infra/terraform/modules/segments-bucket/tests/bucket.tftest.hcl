# The bucket on its own: not public, encrypted, expiring, unversioned, and a
# policy that lets exactly one CloudFront distribution read.

mock_provider "aws" {
  mock_resource "aws_s3_bucket" {
    defaults = {
      arn = "arn:aws:s3:::segments-example"
    }
  }
}

variables {
  name                        = "segments-example"
  expiration_days             = 14
  cloudfront_distribution_arn = "arn:aws:cloudfront::123456789012:distribution/EDFDVBD6EXAMPLE"
}

run "aws_controls" {
  command = apply

  assert {
    condition = (
      aws_s3_bucket_public_access_block.this[0].block_public_acls &&
      aws_s3_bucket_public_access_block.this[0].block_public_policy &&
      aws_s3_bucket_public_access_block.this[0].ignore_public_acls &&
      aws_s3_bucket_public_access_block.this[0].restrict_public_buckets
    )
    error_message = "Every public access block setting is on."
  }
  assert {
    condition     = one(one(aws_s3_bucket_server_side_encryption_configuration.this[0].rule).apply_server_side_encryption_by_default).sse_algorithm == "AES256"
    error_message = "Objects are encrypted at rest."
  }
  assert {
    condition     = one(one(aws_s3_bucket_lifecycle_configuration.this[0].rule).expiration).days == 14 && one(aws_s3_bucket_lifecycle_configuration.this[0].rule).status == "Enabled"
    error_message = "Segments expire after expiration_days."
  }
  assert {
    condition     = one(aws_s3_bucket_versioning.this.versioning_configuration).status == "Disabled"
    error_message = "Segments are immutable: no versioning."
  }
  assert {
    condition     = one(aws_s3_bucket_ownership_controls.this.rule).object_ownership == "BucketOwnerEnforced"
    error_message = "ACLs are off."
  }
}

run "policy" {
  command = apply

  assert {
    condition     = length([for s in jsondecode(aws_s3_bucket_policy.this.policy).Statement : s if s.Effect == "Allow" && s.Principal == "*"]) == 0
    error_message = "No statement allows everyone."
  }
  assert {
    condition = alltrue([for s in jsondecode(aws_s3_bucket_policy.this.policy).Statement :
      s.Principal == { Service = "cloudfront.amazonaws.com" } &&
      s.Condition == { StringEquals = { "AWS:SourceArn" = "arn:aws:cloudfront::123456789012:distribution/EDFDVBD6EXAMPLE" } }
      if s.Effect == "Allow"
    ])
    error_message = "Only the CloudFront service, for this distribution, is allowed anything."
  }
  assert {
    condition     = toset(flatten([for s in jsondecode(aws_s3_bucket_policy.this.policy).Statement : s.Action if s.Effect == "Allow"])) == toset(["s3:GetObject", "s3:ListBucket"])
    error_message = "CloudFront may read objects and list the bucket (a missing key is then 404, not 403), nothing else."
  }
  assert {
    condition = anytrue([for s in jsondecode(aws_s3_bucket_policy.this.policy).Statement :
      s.Effect == "Deny" && s.Condition == { Bool = { "aws:SecureTransport" = "false" } }
    ])
    error_message = "Plain HTTP is refused."
  }
}

run "s3_compatible_subset" {
  command = apply

  variables {
    aws_controls                = false
    cloudfront_distribution_arn = null
  }

  assert {
    condition = (
      length(aws_s3_bucket_public_access_block.this) == 0 &&
      length(aws_s3_bucket_server_side_encryption_configuration.this) == 0 &&
      length(aws_s3_bucket_lifecycle_configuration.this) == 0
    )
    error_message = "aws_controls = false leaves out what S3-compatible servers do not implement."
  }
  assert {
    condition     = [for s in jsondecode(aws_s3_bucket_policy.this.policy).Statement : s.Sid] == ["DenyPlainHTTP"]
    error_message = "Without a distribution, nobody is allowed anything."
  }
}

run "prefix_must_end_in_slash" {
  command = plan

  variables {
    prefix = "rooms"
  }

  expect_failures = [var.prefix]
}
