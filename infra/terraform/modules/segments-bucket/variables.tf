variable "name" {
  description = "Bucket name (globally unique)."
  type        = string
  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", var.name))
    error_message = "A bucket name is 3-63 characters of a-z, 0-9, '.' and '-', starting and ending with a letter or digit."
  }
}

variable "prefix" {
  description = "Key prefix the slicer writes under (DANMAKU_S3_PREFIX): empty, or ending in '/'. The policy and the lifecycle rule cover only keys under it."
  type        = string
  default     = ""
  validation {
    condition     = var.prefix == "" || can(regex("^[A-Za-z0-9._-][A-Za-z0-9._/-]*/$", var.prefix))
    error_message = "The prefix is empty or ends in '/', and does not start with '/'."
  }
}

variable "expiration_days" {
  description = "Days after which segments and manifests are deleted."
  type        = number
  default     = 30
  validation {
    condition     = var.expiration_days >= 1 && floor(var.expiration_days) == var.expiration_days
    error_message = "expiration_days is a whole number of days, at least 1."
  }
}

variable "cloudfront_distribution_arn" {
  description = "ARN of the only CloudFront distribution allowed to read (through origin access control). Null grants no read at all."
  type        = string
  default     = null
}

variable "require_tls" {
  description = "Deny every request that does not come over HTTPS."
  type        = bool
  default     = true
}

variable "aws_controls" {
  description = "Manage the public access block, default encryption and lifecycle rule. S3-compatible servers such as versitygw answer these APIs with 501 NotImplemented; set false only for tests against them."
  type        = bool
  default     = true
}

variable "force_destroy" {
  description = "Let `terraform destroy` delete a bucket that still holds segments."
  type        = bool
  default     = false
}

variable "tags" {
  description = "Tags for the bucket."
  type        = map(string)
  default     = {}
}
