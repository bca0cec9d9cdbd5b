################################################################################
# MSK: a new cluster (serverless or provisioned; IAM authentication, TLS in
# transit) or an existing one given by ARN.
################################################################################

locals {
  create_serverless  = var.create_msk_cluster && var.msk_cluster_type == "serverless"
  create_provisioned = var.create_msk_cluster && var.msk_cluster_type == "provisioned"

  # null with a self-managed Kafka source (variables_kafka.tf).
  self_managed = var.self_managed_kafka != null
  msk_cluster_arn = (
    local.create_serverless ? aws_msk_serverless_cluster.this[0].arn :
    local.create_provisioned ? aws_msk_cluster.this[0].arn :
    local.self_managed ? null : var.msk_cluster_arn
  )
}

# IAM/TLS bootstrap brokers of the MSK cluster in use (created or existing).
data "aws_msk_bootstrap_brokers" "this" {
  count = local.self_managed ? 0 : 1

  cluster_arn = local.msk_cluster_arn
}

# Brokers and Lambda's event pollers share this group: the pollers' network
# interfaces live in the cluster subnets with the cluster's security groups, so
# the group must admit itself on 9098 and reach the VPC endpoints on 443.
resource "aws_security_group" "msk" {
  count = var.create_msk_cluster ? 1 : 0

  name_prefix = "${var.name}-msk-"
  description = "icestream MSK brokers and Lambda event pollers"
  vpc_id      = var.vpc_id
  tags        = merge(local.tags, { Name = "${var.name}-msk" })

  lifecycle {
    create_before_destroy = true

    precondition {
      condition     = var.vpc_id != null && length(var.subnet_ids) >= 2
      error_message = "create_msk_cluster needs vpc_id and at least two subnet_ids."
    }
  }
}

resource "aws_vpc_security_group_ingress_rule" "msk_self" {
  count = var.create_msk_cluster ? 1 : 0

  security_group_id            = aws_security_group.msk[0].id
  referenced_security_group_id = aws_security_group.msk[0].id
  ip_protocol                  = "tcp"
  from_port                    = 9098
  to_port                      = 9098
  description                  = "Kafka IAM/TLS between brokers and Lambda event pollers"
}

resource "aws_vpc_security_group_ingress_rule" "msk_clients" {
  for_each = var.create_msk_cluster ? toset(var.msk_client_cidr_blocks) : toset([])

  security_group_id = aws_security_group.msk[0].id
  cidr_ipv4         = each.value
  ip_protocol       = "tcp"
  from_port         = 9098
  to_port           = 9098
  description       = "Kafka IAM/TLS from producers"
}

resource "aws_vpc_security_group_egress_rule" "msk_self" {
  count = var.create_msk_cluster ? 1 : 0

  security_group_id            = aws_security_group.msk[0].id
  referenced_security_group_id = aws_security_group.msk[0].id
  ip_protocol                  = "tcp"
  from_port                    = 9098
  to_port                      = 9098
  description                  = "Kafka IAM/TLS from Lambda event pollers to brokers"
}

# The pollers call STS and Lambda and write failed batches to S3 or SQS: through interface
# endpoints (VPC CIDR), an S3 gateway endpoint (S3's public prefix list) or a NAT gateway
# (public addresses). The default admits all three on 443 only.
resource "aws_vpc_security_group_egress_rule" "msk_https" {
  for_each = var.create_msk_cluster ? toset(var.msk_https_egress_cidr_blocks) : toset([])

  #checkov:skip=CKV_AWS_382:HTTPS only, to AWS APIs behind NAT; narrow msk_https_egress_cidr_blocks to the VPC CIDR when every API has an interface endpoint.
  security_group_id = aws_security_group.msk[0].id
  cidr_ipv4         = each.value
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
  description       = "HTTPS from Lambda event pollers to STS, Lambda and the on-failure destination"
}

resource "aws_msk_serverless_cluster" "this" {
  count = local.create_serverless ? 1 : 0

  cluster_name = var.name

  client_authentication {
    sasl {
      iam {
        enabled = true
      }
    }
  }

  vpc_config {
    subnet_ids         = var.subnet_ids
    security_group_ids = [aws_security_group.msk[0].id]
  }

  tags = local.tags
}

resource "aws_cloudwatch_log_group" "msk" {
  count = local.create_provisioned ? 1 : 0

  name              = "/aws/msk/${var.name}"
  retention_in_days = var.log_retention_in_days
  kms_key_id        = local.kms_key_arn
  tags              = local.tags
}

resource "aws_msk_cluster" "this" {
  count = local.create_provisioned ? 1 : 0

  cluster_name           = var.name
  kafka_version          = var.msk_kafka_version
  number_of_broker_nodes = var.msk_broker_count

  broker_node_group_info {
    instance_type   = var.msk_broker_instance_type
    client_subnets  = var.subnet_ids
    security_groups = [aws_security_group.msk[0].id]

    storage_info {
      ebs_storage_info {
        volume_size = var.msk_broker_volume_size
      }
    }

    connectivity_info {
      public_access {
        type = "DISABLED"
      }
    }
  }

  client_authentication {
    unauthenticated = false

    sasl {
      iam = true
    }
  }

  encryption_info {
    encryption_at_rest_kms_key_arn = local.kms_key_arn

    encryption_in_transit {
      client_broker = "TLS"
      in_cluster    = true
    }
  }

  logging_info {
    broker_logs {
      cloudwatch_logs {
        enabled   = true
        log_group = aws_cloudwatch_log_group.msk[0].name
      }
    }
  }

  tags = local.tags

  lifecycle {
    # MSK spreads brokers evenly over the client subnets' zones and refuses any other count.
    precondition {
      condition     = var.msk_broker_count % max(1, length(var.subnet_ids)) == 0
      error_message = "msk_broker_count (${var.msk_broker_count}) must be a multiple of the number of subnet_ids (${length(var.subnet_ids)}): MSK puts the same number of brokers in each subnet's zone."
    }
  }
}
