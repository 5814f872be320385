terraform {
  # 1.7: mock providers for `terraform test`.
  required_version = ">= 1.7"
  required_providers {
    aws = {
      source = "hashicorp/aws"
      # The release the tests run against; 6.x is a major release with
      # breaking changes that nobody has tested this module with.
      version = "~> 5.100"
    }
  }
}

provider "aws" {
  region = var.region
  default_tags {
    tags = merge(var.tags, {
      "danmaku:event" = var.event
    })
  }
}
