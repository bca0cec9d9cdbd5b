################################################################################
# Complete example: a new VPC (private subnets only, no NAT: VPC endpoints
# instead), a new MSK Serverless cluster with IAM auth, and icestream with the
# Glue catalog, queued commits, an SQS on-failure destination and an SNS topic
# for the alarms. Build the zips first: `make build` at the repository root.
################################################################################

provider "aws" {
  region = var.region
}

# Pin the zones by name so the subnet layout never shifts when AWS adds a zone.
data "aws_availability_zones" "available" {
  state = "available"

  filter {
    name   = "zone-name"
    values = [for suffix in ["a", "b", "c"] : "${var.region}${suffix}"]
  }
}

locals {
  azs  = slice(data.aws_availability_zones.available.names, 0, 3)
  tags = { Example = "complete", Project = "icestream" }
}

module "vpc" {
  #checkov:skip=CKV_TF_1:Example consumes the public registry module by version constraint, as terraform-aws-modules examples do; pin an exact version or a commit in production.
  source  = "terraform-aws-modules/vpc/aws"
  version = "~> 6.0"

  name = var.name
  cidr = var.vpc_cidr
  azs  = local.azs

  private_subnets = [for i, _ in local.azs : cidrsubnet(var.vpc_cidr, 4, i)]

  enable_nat_gateway   = false
  enable_dns_hostnames = true
  enable_dns_support   = true

  manage_default_security_group = true
  default_security_group_egress = []

  enable_flow_log                                 = true
  create_flow_log_cloudwatch_log_group            = true
  create_flow_log_cloudwatch_iam_role             = true
  flow_log_cloudwatch_log_group_retention_in_days = 365

  tags = local.tags
}

# Lambda's Kafka pollers run in the cluster subnets: without NAT they reach STS,
# Lambda and the on-failure destination (SQS) through these endpoints.
module "vpc_endpoints" {
  #checkov:skip=CKV_TF_1:Example consumes the public registry module by version constraint, as terraform-aws-modules examples do; pin an exact version or a commit in production.
  source  = "terraform-aws-modules/vpc/aws//modules/vpc-endpoints"
  version = "~> 6.0"

  vpc_id = module.vpc.vpc_id

  create_security_group      = true
  security_group_name_prefix = "${var.name}-endpoints-"
  security_group_description = "HTTPS from the VPC to interface endpoints"
  security_group_rules = {
    ingress_https = {
      description = "HTTPS from the VPC"
      cidr_blocks = [module.vpc.vpc_cidr_block]
    }
  }

  endpoints = {
    s3 = {
      service         = "s3"
      service_type    = "Gateway"
      route_table_ids = module.vpc.private_route_table_ids
    }
    sts = {
      service             = "sts"
      private_dns_enabled = true
      subnet_ids          = module.vpc.private_subnets
    }
    lambda = {
      service             = "lambda"
      private_dns_enabled = true
      subnet_ids          = module.vpc.private_subnets
    }
    sqs = {
      service             = "sqs"
      private_dns_enabled = true
      subnet_ids          = module.vpc.private_subnets
    }
  }

  tags = local.tags
}

module "icestream" {
  source = "../.."

  name = var.name
  tags = local.tags

  create_msk_cluster     = true
  msk_cluster_type       = "serverless"
  vpc_id                 = module.vpc.vpc_id
  subnet_ids             = module.vpc.private_subnets
  msk_client_cidr_blocks = [module.vpc.vpc_cidr_block]

  ingest_topics = ["vehicle-telemetry"]
  enable_cdc    = true
  cdc_topic     = "accounts-cdc"

  catalog       = "glue"
  namespace     = "bigdata"
  source_format = "proto"
  dedup         = "window"
  commit_mode   = "queued"

  on_failure_destination = "sqs"
  provisioned_pollers = {
    minimum_pollers = 1
    maximum_pollers = 10
  }

  create_sns_topic = true

  depends_on = [module.vpc_endpoints]
}
