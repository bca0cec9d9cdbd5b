################################################################################
# Complete example: a new VPC (private subnets only, no NAT: VPC endpoints
# instead), a new MSK Serverless cluster with IAM auth, and icestream with the
# Glue catalog, a pipeline file, queued commits, an SQS on-failure destination
# and an SNS topic for the alarms. Build the zips first: `make build` at the
# repository root.
#
# Plain resources only (no registry modules), so `terraform validate` runs
# offline (scripts/check/infra-check.sh).
################################################################################

provider "aws" {
  region = var.region
}

# Three zones the account can use: not every region has an `a`, `b` and `c`, and an account's
# zone names map to different physical zones (Local Zones need opting in and carry no MSK).
data "aws_availability_zones" "available" {
  #checkov:skip=CKV_AWS_394:Only read when availability_zones is empty; set it to pin the zones (a zone added later could otherwise sort into the first three).
  count = length(var.availability_zones) > 0 ? 0 : 1

  state = "available"

  filter {
    name   = "opt-in-status"
    values = ["opt-in-not-required"]
  }
}

locals {
  zone_names = sort(flatten(data.aws_availability_zones.available[*].names))
  azs        = length(var.availability_zones) > 0 ? var.availability_zones : slice(local.zone_names, 0, min(3, length(local.zone_names)))
  tags       = { Example = "complete", Project = "icestream" }
  # Interface endpoints Lambda's Kafka pollers need without NAT (S3 is a gateway endpoint).
  interface_endpoints = ["sts", "lambda", "sqs"]
}

resource "aws_vpc" "this" {
  cidr_block           = var.vpc_cidr
  enable_dns_hostnames = true
  enable_dns_support   = true
  tags                 = merge(local.tags, { Name = var.name })
}

# No rules: nothing uses the default security group.
resource "aws_default_security_group" "this" {
  vpc_id = aws_vpc.this.id
  tags   = local.tags
}

resource "aws_subnet" "private" {
  for_each = { for i, az in local.azs : az => i }

  vpc_id            = aws_vpc.this.id
  availability_zone = each.key
  cidr_block        = cidrsubnet(var.vpc_cidr, 4, each.value)
  tags              = merge(local.tags, { Name = "${var.name}-private-${each.key}" })
}

resource "aws_route_table" "private" {
  vpc_id = aws_vpc.this.id
  tags   = merge(local.tags, { Name = "${var.name}-private" })
}

resource "aws_route_table_association" "private" {
  for_each = aws_subnet.private

  subnet_id      = each.value.id
  route_table_id = aws_route_table.private.id
}

resource "aws_cloudwatch_log_group" "flow_logs" {
  #checkov:skip=CKV_AWS_158:Example: flow logs use the account's default CloudWatch Logs encryption.
  name              = "/aws/vpc/${var.name}-flow-logs"
  retention_in_days = 365
  tags              = local.tags
}

data "aws_iam_policy_document" "flow_logs_assume" {
  statement {
    actions = ["sts:AssumeRole"]

    principals {
      type        = "Service"
      identifiers = ["vpc-flow-logs.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "flow_logs" {
  name_prefix        = "${var.name}-flow-logs-"
  assume_role_policy = data.aws_iam_policy_document.flow_logs_assume.json
  tags               = local.tags
}

resource "aws_iam_role_policy" "flow_logs" {
  name = "write-flow-logs"
  role = aws_iam_role.flow_logs.id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Effect   = "Allow"
      Action   = ["logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"]
      Resource = ["${aws_cloudwatch_log_group.flow_logs.arn}:*"]
    }]
  })
}

resource "aws_flow_log" "this" {
  vpc_id          = aws_vpc.this.id
  traffic_type    = "ALL"
  log_destination = aws_cloudwatch_log_group.flow_logs.arn
  iam_role_arn    = aws_iam_role.flow_logs.arn
  tags            = local.tags
}

resource "aws_security_group" "endpoints" {
  name_prefix = "${var.name}-endpoints-"
  description = "HTTPS from the VPC to interface endpoints"
  vpc_id      = aws_vpc.this.id
  tags        = local.tags
}

resource "aws_vpc_security_group_ingress_rule" "endpoints_https" {
  security_group_id = aws_security_group.endpoints.id
  cidr_ipv4         = var.vpc_cidr
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
  description       = "HTTPS from the VPC"
}

resource "aws_vpc_endpoint" "s3" {
  vpc_id            = aws_vpc.this.id
  service_name      = "com.amazonaws.${var.region}.s3"
  vpc_endpoint_type = "Gateway"
  route_table_ids   = [aws_route_table.private.id]
  tags              = local.tags
}

resource "aws_vpc_endpoint" "interface" {
  for_each = toset(local.interface_endpoints)

  vpc_id              = aws_vpc.this.id
  service_name        = "com.amazonaws.${var.region}.${each.value}"
  vpc_endpoint_type   = "Interface"
  private_dns_enabled = true
  subnet_ids          = [for s in aws_subnet.private : s.id]
  security_group_ids  = [aws_security_group.endpoints.id]
  tags                = local.tags
}

module "icestream" {
  source = "../.."

  name          = var.name
  artifacts_dir = var.artifacts_dir
  tags          = local.tags

  create_msk_cluster     = true
  msk_cluster_type       = "serverless"
  vpc_id                 = aws_vpc.this.id
  subnet_ids             = [for s in aws_subnet.private : s.id]
  msk_client_cidr_blocks = [var.vpc_cidr]

  # No NAT here: the pollers reach STS, Lambda and SQS through the interface endpoints
  # (VPC CIDR); the on-failure destination is SQS, so S3's addresses are not needed.
  msk_https_egress_cidr_blocks = [var.vpc_cidr]

  # Tables and topics come from the pipeline file.
  pipeline_file = "${path.module}/pipelines/pipelines.toml"

  catalog     = "glue"
  namespace   = "bigdata"
  commit_mode = "queued"

  on_failure_destination = "sqs"
  provisioned_pollers = {
    minimum_pollers = 1
    maximum_pollers = 10
  }

  create_sns_topic = true

  depends_on = [aws_vpc_endpoint.s3, aws_vpc_endpoint.interface]
}
