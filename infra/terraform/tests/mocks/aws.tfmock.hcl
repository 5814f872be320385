# Values the mock provider returns for computed attributes the tests read;
# the rest are random strings.

mock_data "aws_caller_identity" {
  defaults = {
    account_id = "123456789012"
  }
}

mock_data "aws_partition" {
  defaults = {
    partition = "aws"
  }
}

# A 16-vCPU, 32 GiB machine of either architecture unless a test
# overrides it (override_data).
mock_data "aws_ec2_instance_type" {
  defaults = {
    default_vcpus           = 16
    memory_size             = 32768
    supported_architectures = ["x86_64", "arm64"]
  }
}

mock_data "aws_secretsmanager_random_password" {
  defaults = {
    random_password = "MockGeneratedSecretValue0123456789abcdefXYZ"
  }
}

mock_resource "aws_s3_bucket" {
  defaults = {
    arn                         = "arn:aws:s3:::danmaku-test-segments-123456789012"
    bucket_regional_domain_name = "danmaku-test-segments-123456789012.s3.us-east-1.amazonaws.com"
  }
}

mock_resource "aws_cloudfront_function" {
  defaults = {
    arn = "arn:aws:cloudfront::123456789012:function/danmaku-test-refuse-escapes"
  }
}

mock_resource "aws_cloudfront_distribution" {
  defaults = {
    arn            = "arn:aws:cloudfront::123456789012:distribution/EDFDVBD6EXAMPLE"
    domain_name    = "d111111abcdef8.cloudfront.net"
    hosted_zone_id = "Z2FDTNDATAQYW2"
  }
}

mock_resource "aws_elasticache_replication_group" {
  defaults = {
    configuration_endpoint_address = "clustercfg.danmaku-test.abc123.use1.cache.amazonaws.com"
  }
}

# Arguments the provider validates as ARNs when they are passed on.

mock_resource "aws_iam_instance_profile" {
  defaults = {
    arn = "arn:aws:iam::123456789012:instance-profile/danmaku-test"
  }
}

mock_resource "aws_iam_role" {
  defaults = {
    arn = "arn:aws:iam::123456789012:role/danmaku-test"
  }
}

mock_resource "aws_lb" {
  defaults = {
    arn      = "arn:aws:elasticloadbalancing:us-east-1:123456789012:loadbalancer/app/danmaku-test-gslb/50dc6c495c0c9188"
    dns_name = "danmaku-test-gslb-1234567890.us-east-1.elb.amazonaws.com"
    zone_id  = "Z35SXDOTRQ7X7K"
  }
}

mock_resource "aws_lb_target_group" {
  defaults = {
    arn = "arn:aws:elasticloadbalancing:us-east-1:123456789012:targetgroup/danmaku-test-gslb/73e2d6bc24d8a067"
  }
}

mock_resource "aws_launch_template" {
  defaults = {
    id             = "lt-0123456789abcdef0"
    latest_version = 1
  }
}

mock_resource "aws_lb_listener" {
  defaults = {
    arn = "arn:aws:elasticloadbalancing:us-east-1:123456789012:listener/app/danmaku-test-gslb/50dc6c495c0c9188/f2f7dc8efc522ab2"
  }
}
