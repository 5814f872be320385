# Applies modules/segments-bucket to an S3-compatible server (versitygw in
# terraform_test.go): the bucket, its ownership controls and its policy go
# through the provider's real S3 calls. Not applied here: the public access
# block, default encryption and lifecycle rule (aws_controls = false:
# versitygw answers them 501 NotImplemented), and the CloudFront statements
# of the policy (versitygw refuses a Service principal and the
# AWS:SourceArn condition key as MalformedPolicy); tests/segments.tftest.hcl
# checks those on the plan instead.

terraform {
  required_version = ">= 1.7"
  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = "~> 5.100"
    }
  }
}

variable "endpoint" {
  description = "Base URL of the S3-compatible server."
  type        = string
}

variable "access_key" {
  description = "Access key of the server's root user."
  type        = string
  sensitive   = true
}

variable "secret_key" {
  description = "Secret key of the server's root user."
  type        = string
  sensitive   = true
}

variable "region" {
  description = "Signing region the server expects."
  type        = string
  default     = "us-east-1"
}

variable "bucket" {
  description = "Name of the bucket to create."
  type        = string
}

provider "aws" {
  region                      = var.region
  access_key                  = var.access_key
  secret_key                  = var.secret_key
  s3_use_path_style           = true
  skip_credentials_validation = true
  skip_requesting_account_id  = true
  skip_metadata_api_check     = true
  skip_region_validation      = true
  endpoints {
    s3 = var.endpoint
  }
}

module "segments_bucket" {
  source = "../../modules/segments-bucket"

  name                        = var.bucket
  cloudfront_distribution_arn = null
  aws_controls                = false
  force_destroy               = true
}

output "bucket" {
  description = "Name of the bucket created."
  value       = module.segments_bucket.id
}

output "policy" {
  description = "The bucket policy Terraform applied."
  value       = module.segments_bucket.policy
}
