# gslb.DOMAIN and cdn.DOMAIN. The edge and ingest machines publish their
# own names (e-INSTANCE.nodes.DOMAIN, i-INSTANCE.nodes.DOMAIN) when they
# boot and withdraw them when they shut down (node-boot.sh); whatever way a
# machine goes, node_records.tf deletes its name too: an auto scaling group
# replaces machines without telling Terraform.

# One weighted record per load balancer, equal weights: resolvers spread
# the audience over them. A load balancer with no healthy gslb behind it
# drops out of the answers.
resource "aws_route53_record" "gslb" {
  count          = var.gslb_load_balancers
  zone_id        = var.dns_zone_id
  name           = local.gslb_host
  type           = "A"
  set_identifier = local.lb_names[count.index]
  weighted_routing_policy {
    weight = 1
  }
  alias {
    name                   = aws_lb.gslb[count.index].dns_name
    zone_id                = aws_lb.gslb[count.index].zone_id
    evaluate_target_health = true
  }
}

moved {
  from = aws_route53_record.gslb
  to   = aws_route53_record.gslb[0]
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
