# gslb.DOMAIN and cdn.DOMAIN. The edge and ingest machines publish their
# own names (e-A-B-C-D.nodes.DOMAIN, i-A-B-C-D.nodes.DOMAIN) when they boot
# and withdraw them when they shut down (node-boot.sh): an auto scaling group
# replaces machines without telling Terraform.

resource "aws_route53_record" "gslb" {
  zone_id = var.dns_zone_id
  name    = local.gslb_host
  type    = "A"
  alias {
    name                   = aws_lb.gslb.dns_name
    zone_id                = aws_lb.gslb.zone_id
    evaluate_target_health = true
  }
}

resource "aws_route53_record" "cdn" {
  for_each = var.cdn_certificate_arn != null ? toset(["A", "AAAA"]) : toset([])
  zone_id  = var.dns_zone_id
  name     = "cdn.${var.domain}"
  type     = each.key
  alias {
    name                   = aws_cloudfront_distribution.cdn.domain_name
    zone_id                = aws_cloudfront_distribution.cdn.hosted_zone_id
    evaluate_target_health = false
  }
}
