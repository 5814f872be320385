# Segments and manifests: written once a slot by the slicer to S3, read by
# every viewer through CloudFront. What the CDN must do is fixed by
# docs/segment-format.md: segments are immutable (Cache-Control: public,
# max-age=31536000, immutable), the live manifest lives one second
# (max-age=1), and a slot not yet written is a 404 that must not outlive the
# moment it is written by more than a fraction of a slot.

module "segments_bucket" {
  source = "./modules/segments-bucket"

  name                        = "${local.name}-segments-${data.aws_caller_identity.this.account_id}"
  prefix                      = var.s3_prefix
  expiration_days             = var.segment_retention_days
  cloudfront_distribution_arn = aws_cloudfront_distribution.cdn.arn
  force_destroy               = var.force_destroy_bucket
}

resource "aws_cloudfront_origin_access_control" "segments" {
  name                              = "${local.name}-segments"
  description                       = "CloudFront signs its requests to the segments bucket"
  origin_access_control_origin_type = "s3"
  signing_behavior                  = "always"
  signing_protocol                  = "sigv4"
}

locals {
  # Nothing a viewer sends selects a different object: the key is the path.
  # Authorization (a viewer's token), cookies and query strings (cache
  # busters) neither split the cache nor reach S3, where a viewer's
  # Authorization would replace CloudFront's own signature.
  cdn_cache_key = {
    headers       = "none"
    cookies       = "none"
    query_strings = "none"
  }

  cdn_paths = {
    segments_1000 = "${var.s3_prefix}rooms/*/s/*"
    segments_ms   = "${var.s3_prefix}rooms/*/ms/*"
    manifest      = "${var.s3_prefix}rooms/*/live.json"
  }
}

# Segments: whatever the origin says, up to a year. S3 returns the
# Cache-Control the slicer wrote (immutable, a year), so CloudFront keeps
# each segment as long as it keeps anything.
resource "aws_cloudfront_cache_policy" "segments" {
  name        = "${local.name}-segments"
  comment     = "immutable segments: honour the origin's max-age (a year)"
  min_ttl     = 0
  default_ttl = 86400
  max_ttl     = 31536000
  parameters_in_cache_key_and_forwarded_to_origin {
    enable_accept_encoding_gzip   = true
    enable_accept_encoding_brotli = true
    headers_config {
      header_behavior = local.cdn_cache_key.headers
    }
    cookies_config {
      cookie_behavior = local.cdn_cache_key.cookies
    }
    query_strings_config {
      query_string_behavior = local.cdn_cache_key.query_strings
    }
  }
}

# The live manifest, and anything else: never more than a second, so a
# client that reads it to jump to live lands at most a second behind.
resource "aws_cloudfront_cache_policy" "manifest" {
  name        = "${local.name}-manifest"
  comment     = "live manifest: at most one second"
  min_ttl     = 0
  default_ttl = 1
  max_ttl     = 1
  parameters_in_cache_key_and_forwarded_to_origin {
    enable_accept_encoding_gzip   = true
    enable_accept_encoding_brotli = true
    headers_config {
      header_behavior = local.cdn_cache_key.headers
    }
    cookies_config {
      cookie_behavior = local.cdn_cache_key.cookies
    }
    query_strings_config {
      query_string_behavior = local.cdn_cache_key.query_strings
    }
  }
}

# Stated rather than left to the default so that nothing can start
# forwarding viewer headers to S3 by a later edit of the cache policies.
resource "aws_cloudfront_origin_request_policy" "none" {
  name    = "${local.name}-nothing"
  comment = "forward no viewer header, cookie or query string to S3"
  headers_config {
    header_behavior = "none"
  }
  cookies_config {
    cookie_behavior = "none"
  }
  query_strings_config {
    query_string_behavior = "none"
  }
}

# The browser SDK and the demo page fetch segments from the page's origin,
# another than the CDN's. The headers are added at the edge, after the
# cache, so one cached object serves every allowed origin.
resource "aws_cloudfront_response_headers_policy" "cors" {
  name    = "${local.name}-cors"
  comment = "CORS for the browser SDK"
  cors_config {
    access_control_allow_credentials = false
    access_control_allow_headers {
      items = ["*"]
    }
    access_control_allow_methods {
      items = ["GET", "HEAD", "OPTIONS"]
    }
    access_control_allow_origins {
      items = var.cors_origins
    }
    access_control_max_age_sec = 86400
    origin_override            = true
  }
}

# One URL per key: a path with a percent-escape is a coded 404 at the edge,
# before the cache, so S3 (which decodes %2F) never serves a key under a
# second cache key. refuse-escapes.js says why; infra/local/varnish.vcl does
# the same for the local CDN.
resource "aws_cloudfront_function" "refuse_escapes" {
  name    = "${local.name}-refuse-escapes"
  comment = "404 for a path with a percent-escape"
  runtime = "cloudfront-js-2.0"
  publish = true
  code    = file("${path.module}/refuse-escapes.js")
}

resource "aws_cloudfront_distribution" "cdn" {
  enabled         = true
  comment         = "${local.name} segments"
  aliases         = var.cdn_certificate_arn != null ? ["cdn.${var.domain}"] : []
  price_class     = var.cdn_price_class
  http_version    = "http2and3"
  is_ipv6_enabled = true

  origin {
    origin_id                = "segments"
    domain_name              = module.segments_bucket.regional_domain_name
    origin_access_control_id = aws_cloudfront_origin_access_control.segments.id
    # A segment is worth something to a live viewer for a second or two:
    # fail fast and let the SDK retry rather than queue behind a slow origin.
    connection_attempts = 3
    connection_timeout  = 2
    # Every location asks the shield, the shield asks S3: a slot costs S3
    # about one GET whatever the number of locations, and concurrent misses
    # for one key collapse into one request there.
    origin_shield {
      enabled              = true
      origin_shield_region = coalesce(var.origin_shield_region, var.region)
    }
  }

  default_cache_behavior {
    target_origin_id           = "segments"
    viewer_protocol_policy     = "https-only"
    allowed_methods            = ["GET", "HEAD", "OPTIONS"]
    cached_methods             = ["GET", "HEAD"]
    compress                   = true
    cache_policy_id            = aws_cloudfront_cache_policy.manifest.id
    origin_request_policy_id   = aws_cloudfront_origin_request_policy.none.id
    response_headers_policy_id = aws_cloudfront_response_headers_policy.cors.id
    function_association {
      event_type   = "viewer-request"
      function_arn = aws_cloudfront_function.refuse_escapes.arn
    }
  }

  dynamic "ordered_cache_behavior" {
    for_each = [
      { path = local.cdn_paths.manifest, policy = aws_cloudfront_cache_policy.manifest.id },
      { path = local.cdn_paths.segments_1000, policy = aws_cloudfront_cache_policy.segments.id },
      { path = local.cdn_paths.segments_ms, policy = aws_cloudfront_cache_policy.segments.id },
    ]
    content {
      path_pattern               = ordered_cache_behavior.value.path
      target_origin_id           = "segments"
      viewer_protocol_policy     = "https-only"
      allowed_methods            = ["GET", "HEAD", "OPTIONS"]
      cached_methods             = ["GET", "HEAD"]
      compress                   = true
      cache_policy_id            = ordered_cache_behavior.value.policy
      origin_request_policy_id   = aws_cloudfront_origin_request_policy.none.id
      response_headers_policy_id = aws_cloudfront_response_headers_policy.cors.id
      function_association {
        event_type   = "viewer-request"
        function_arn = aws_cloudfront_function.refuse_escapes.arn
      }
    }
  }

  # S3 sends no Cache-Control with an error, and CloudFront would otherwise
  # keep it 10 s: a 404 for a slot asked a moment early would hide the
  # segment for ten slots, an S3 hiccup (5xx) would black out ten seconds.
  # The errors pass through unchanged (no response page); only how long
  # they are cached changes.
  dynamic "custom_error_response" {
    for_each = [403, 404, 500, 502, 503, 504]
    content {
      error_code            = custom_error_response.value
      error_caching_min_ttl = var.not_found_cache_seconds
    }
  }

  restrictions {
    geo_restriction {
      restriction_type = "none"
    }
  }

  viewer_certificate {
    cloudfront_default_certificate = var.cdn_certificate_arn == null
    acm_certificate_arn            = var.cdn_certificate_arn
    ssl_support_method             = var.cdn_certificate_arn != null ? "sni-only" : null
    minimum_protocol_version       = var.cdn_certificate_arn != null ? "TLSv1.2_2021" : "TLSv1"
  }
}
