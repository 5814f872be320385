# The segments bucket and the CDN in front of it: what docs/segment-format.md
# requires of them (immutable segments, a manifest of at most a second, a
# 404 for a slot not yet written that is cached at most a second), a bucket
# nobody but the distribution can read, and no viewer header reaching S3.

mock_provider "aws" {
  source = "./tests/mocks"
}

variables {
  event                    = "test"
  region                   = "us-east-1"
  availability_zones       = ["us-east-1a", "us-east-1b", "us-east-1c"]
  domain                   = "test.live.example.com"
  dns_zone_id              = "Z0123456789EXAMPLE"
  gslb_certificate_arn     = "arn:aws:acm:us-east-1:123456789012:certificate/00000000-0000-0000-0000-000000000001"
  cdn_certificate_arn      = "arn:aws:acm:us-east-1:123456789012:certificate/00000000-0000-0000-0000-000000000002"
  ticket_key_secret_arn    = "arn:aws:secretsmanager:us-east-1:123456789012:secret:login/ticket-key-AbCdEf"
  release_s3_uri           = "s3://artifacts-example/danmaku/v1/danmaku-linux-amd64"
  ami_id                   = "ami-0123456789abcdef0"
  redis_maintenance_window = "sun:18:00-sun:19:00"
  cors_origins             = ["https://app.example.com"]
  gslb_fleet               = { instance_type = "c7i.large", count = 2 }
  ingest_fleet             = { instance_type = "c6in.large", count = 2 }
  edge_fleet               = { instance_type = "c6in.large", count = 2 }
}

run "cdn_and_bucket" {
  command = apply

  assert {
    condition     = aws_cloudfront_cache_policy.manifest.max_ttl <= 1 && aws_cloudfront_cache_policy.manifest.default_ttl <= 1 && aws_cloudfront_cache_policy.manifest.min_ttl == 0
    error_message = "The live manifest must be cached at most 1 s (it has max-age=1)."
  }
  assert {
    condition     = aws_cloudfront_cache_policy.segments.max_ttl >= 31536000 && aws_cloudfront_cache_policy.segments.min_ttl == 0
    error_message = "Segments must be cached as long as their immutable Cache-Control says (a year)."
  }
  assert {
    condition = {
      for b in aws_cloudfront_distribution.cdn.ordered_cache_behavior : b.path_pattern => b.cache_policy_id
      } == {
      "rooms/*/live.json" = aws_cloudfront_cache_policy.manifest.id
      "rooms/*/s/*"       = aws_cloudfront_cache_policy.segments.id
      "rooms/*/ms/*"      = aws_cloudfront_cache_policy.segments.id
    }
    error_message = "One behaviour per key shape: the manifest, 1000 ms segments (s/) and shorter ones (ms/)."
  }
  assert {
    condition     = aws_cloudfront_distribution.cdn.ordered_cache_behavior[0].path_pattern == "rooms/*/live.json"
    error_message = "The manifest's behaviour comes first, before any broader pattern could match it."
  }
  assert {
    condition     = one(aws_cloudfront_distribution.cdn.default_cache_behavior).cache_policy_id == aws_cloudfront_cache_policy.manifest.id
    error_message = "Anything that is not a segment is cached at most a second."
  }
  assert {
    condition     = one([for e in aws_cloudfront_distribution.cdn.custom_error_response : e.error_caching_min_ttl if e.error_code == 404]) <= 1
    error_message = "A 404 (a slot not yet written) must be cached at most 1 s."
  }
  assert {
    condition     = alltrue([for e in aws_cloudfront_distribution.cdn.custom_error_response : e.error_caching_min_ttl <= 1 && e.response_page_path == null])
    error_message = "Every error is cached at most 1 s and passed through unchanged."
  }
  assert {
    condition     = toset([for e in aws_cloudfront_distribution.cdn.custom_error_response : e.error_code]) == toset([403, 404, 500, 502, 503, 504])
    error_message = "403 and 5xx must not keep CloudFront's 10 s default either."
  }

  assert {
    condition = alltrue([for p in [aws_cloudfront_cache_policy.segments, aws_cloudfront_cache_policy.manifest] :
      one(one(p.parameters_in_cache_key_and_forwarded_to_origin).headers_config).header_behavior == "none" &&
      one(one(p.parameters_in_cache_key_and_forwarded_to_origin).cookies_config).cookie_behavior == "none" &&
      one(one(p.parameters_in_cache_key_and_forwarded_to_origin).query_strings_config).query_string_behavior == "none"
    ])
    error_message = "No header (Authorization included), cookie or query string may be part of the cache key."
  }
  assert {
    condition = (
      one(aws_cloudfront_origin_request_policy.none.headers_config).header_behavior == "none" &&
      one(aws_cloudfront_origin_request_policy.none.cookies_config).cookie_behavior == "none" &&
      one(aws_cloudfront_origin_request_policy.none.query_strings_config).query_string_behavior == "none"
    )
    error_message = "The origin request policy forwards nothing."
  }
  assert {
    condition = alltrue([for b in concat(aws_cloudfront_distribution.cdn.default_cache_behavior, aws_cloudfront_distribution.cdn.ordered_cache_behavior) :
      b.origin_request_policy_id == aws_cloudfront_origin_request_policy.none.id &&
      b.response_headers_policy_id == aws_cloudfront_response_headers_policy.cors.id &&
      b.compress && b.viewer_protocol_policy == "https-only" &&
      length(b.forwarded_values) == 0
    ])
    error_message = "Every behaviour: the forward-nothing origin request policy, CORS headers, compression, HTTPS only, no legacy forwarded_values."
  }
  assert {
    condition = alltrue([for b in concat(aws_cloudfront_distribution.cdn.default_cache_behavior, aws_cloudfront_distribution.cdn.ordered_cache_behavior) :
      [for f in b.function_association : "${f.event_type} ${f.function_arn}"] == ["viewer-request ${aws_cloudfront_function.refuse_escapes.arn}"]
    ])
    error_message = "Every behaviour refuses a percent-escaped path at viewer request, before the cache."
  }
  assert {
    condition     = aws_cloudfront_function.refuse_escapes.runtime == "cloudfront-js-2.0" && aws_cloudfront_function.refuse_escapes.publish
    error_message = "The function is published (behaviours run the LIVE stage) on the runtime its code is written for."
  }
  assert {
    condition     = aws_cloudfront_distribution.cdn.http_version == "http2and3" && aws_cloudfront_distribution.cdn.price_class == "PriceClass_All"
    error_message = "HTTP/2 and HTTP/3, and the configured price class."
  }
  assert {
    condition     = one(one(aws_cloudfront_distribution.cdn.origin).origin_shield).enabled && one(one(aws_cloudfront_distribution.cdn.origin).origin_shield).origin_shield_region == "us-east-1"
    error_message = "Origin Shield is on, in the bucket's region by default."
  }
  assert {
    condition = (
      one(aws_cloudfront_distribution.cdn.origin).origin_access_control_id == aws_cloudfront_origin_access_control.segments.id &&
      aws_cloudfront_origin_access_control.segments.origin_access_control_origin_type == "s3" &&
      aws_cloudfront_origin_access_control.segments.signing_behavior == "always" &&
      aws_cloudfront_origin_access_control.segments.signing_protocol == "sigv4"
    )
    error_message = "The origin is the bucket through origin access control, every request signed."
  }
  assert {
    condition = (
      one(aws_cloudfront_response_headers_policy.cors.cors_config).access_control_allow_origins[0].items == toset(["https://app.example.com"]) &&
      contains(one(aws_cloudfront_response_headers_policy.cors.cors_config).access_control_allow_methods[0].items, "GET") &&
      !one(aws_cloudfront_response_headers_policy.cors.cors_config).access_control_allow_credentials
    )
    error_message = "CORS allows GET from the configured origins, without credentials."
  }
  assert {
    condition     = aws_cloudfront_distribution.cdn.aliases == toset(["cdn.test.live.example.com"]) && output.cdn_base_url == "https://cdn.test.live.example.com/"
    error_message = "With a certificate, the CDN is cdn.DOMAIN and clients get https://cdn.DOMAIN/."
  }
  # The bucket's own controls (public access block, encryption, lifecycle,
  # versioning) are checked in modules/segments-bucket/tests; here, that the
  # root wires its policy to this distribution.
  assert {
    condition     = module.segments_bucket.id == "danmaku-test-segments-123456789012"
    error_message = "The bucket is named after the event and the account."
  }
  assert {
    condition = alltrue([for s in jsondecode(module.segments_bucket.policy).Statement :
      s.Effect == "Deny" || (
        s.Principal == { Service = "cloudfront.amazonaws.com" } &&
        s.Condition == { StringEquals = { "AWS:SourceArn" = aws_cloudfront_distribution.cdn.arn } }
      )
    ])
    error_message = "Only this distribution (the CloudFront service, with its ARN as SourceArn) is allowed anything."
  }
  assert {
    condition = toset([for s in jsondecode(module.segments_bucket.policy).Statement : "${s.Action} ${jsonencode(s.Resource)}" if s.Effect == "Allow"]) == toset([
      "s3:GetObject \"${module.segments_bucket.arn}/*\"",
      "s3:ListBucket \"${module.segments_bucket.arn}\"",
    ])
    error_message = "CloudFront may GetObject, and ListBucket so that a missing key is a 404, not a 403."
  }
}

run "prefixed_keys" {
  command = apply

  variables {
    s3_prefix               = "tour/"
    not_found_cache_seconds = 0
    cdn_certificate_arn     = null
  }

  assert {
    condition     = toset([for b in aws_cloudfront_distribution.cdn.ordered_cache_behavior : b.path_pattern]) == toset(["tour/rooms/*/live.json", "tour/rooms/*/s/*", "tour/rooms/*/ms/*"])
    error_message = "The behaviours follow the key prefix."
  }
  assert {
    condition     = output.cdn_base_url == "https://d111111abcdef8.cloudfront.net/tour/" && length(aws_cloudfront_distribution.cdn.aliases) == 0 && length(aws_route53_record.cdn) == 0
    error_message = "Without a certificate, clients get the distribution's own name, with the prefix."
  }
  assert {
    condition     = alltrue([for e in aws_cloudfront_distribution.cdn.custom_error_response : e.error_caching_min_ttl == 0])
    error_message = "not_found_cache_seconds = 0 caches no error at all."
  }
  assert {
    condition     = one([for s in jsondecode(module.segments_bucket.policy).Statement : s.Resource if s.Action == "s3:GetObject"]) == "${module.segments_bucket.arn}/tour/*"
    error_message = "CloudFront reads only under the prefix."
  }
}
