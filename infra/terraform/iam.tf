################################################################################
# One execution role per function, least privilege: no wildcard actions;
# resources scoped to the function's log group, the cluster/topic/group ARNs
# (built from the cluster ARN), the catalog database and tables or the table
# bucket, the warehouse prefix of each table, the KMS key and the queues.
# Resource "*" only where the action cannot be scoped (ENI management for the
# Kafka pollers / VPC functions, X-Ray).
################################################################################

locals {
  s3_warehouse_arn    = local.glue ? "${aws_s3_bucket.this["warehouse"].arn}/${var.warehouse_prefix}/${var.namespace}.db" : null
  glue_catalog_arn    = "arn:${local.partition}:glue:${local.region}:${local.account}:catalog"
  glue_database_arn   = "arn:${local.partition}:glue:${local.region}:${local.account}:database/${var.namespace}"
  glue_table_arn      = "arn:${local.partition}:glue:${local.region}:${local.account}:table/${var.namespace}"
  vpc_functions       = var.function_vpc_config == null ? local.kafka_functions : keys(local.functions)
  deleting_functions  = ["committer", "maintenance"]
  kafka_failure_to_s3 = var.on_failure_destination == "s3"
}

data "aws_iam_policy_document" "lambda_assume" {
  statement {
    sid     = "LambdaAssume"
    actions = ["sts:AssumeRole"]

    principals {
      type        = "Service"
      identifiers = ["lambda.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "function" {
  for_each = local.functions

  name_prefix        = "${var.name}-${each.key}-"
  description        = "icestream ${each.key} function"
  assume_role_policy = data.aws_iam_policy_document.lambda_assume.json
  tags               = local.tags
}

data "aws_iam_policy_document" "function" {
  for_each = local.functions

  statement {
    sid       = "WriteOwnLogs"
    actions   = ["logs:CreateLogStream", "logs:PutLogEvents"]
    resources = ["${aws_cloudwatch_log_group.function[each.key].arn}:*"]
  }

  statement {
    sid       = "UseDeploymentKey"
    actions   = ["kms:Decrypt", "kms:GenerateDataKey"]
    resources = [aws_kms_key.this.arn]
  }

  # --- MSK (the Kafka mapping uses the function's role) -----------------------
  dynamic "statement" {
    for_each = contains(local.kafka_functions, each.key) ? [1] : []
    content {
      sid = "MskCluster"
      actions = [
        "kafka:DescribeClusterV2", "kafka:GetBootstrapBrokers",
        "kafka-cluster:Connect", "kafka-cluster:DescribeClusterDynamicConfiguration",
      ]
      resources = [local.msk_cluster_arn]
    }
  }

  dynamic "statement" {
    for_each = contains(local.kafka_functions, each.key) ? [1] : []
    content {
      sid       = "MskReadOwnTopics"
      actions   = ["kafka-cluster:DescribeTopic", "kafka-cluster:ReadData"]
      resources = local.function_topic_arns[each.key]
    }
  }

  dynamic "statement" {
    for_each = contains(local.kafka_functions, each.key) ? [1] : []
    content {
      sid       = "MskOwnConsumerGroups"
      actions   = ["kafka-cluster:DescribeGroup", "kafka-cluster:AlterGroup"]
      resources = local.function_group_arns[each.key]
    }
  }

  # ENIs of the Kafka pollers (and of VPC-attached functions): EC2 does not
  # support resource-level scoping for these actions.
  dynamic "statement" {
    for_each = contains(local.vpc_functions, each.key) ? [1] : []
    content {
      sid = "ManagePollerNetworkInterfaces"
      actions = [
        "ec2:CreateNetworkInterface", "ec2:DeleteNetworkInterface", "ec2:DescribeNetworkInterfaces",
        "ec2:DescribeSecurityGroups", "ec2:DescribeSubnets", "ec2:DescribeVpcs",
      ]
      resources = ["*"]
    }
  }

  dynamic "statement" {
    for_each = contains(local.kafka_functions, each.key) && local.kafka_failure_to_s3 ? [1] : []
    content {
      sid       = "WriteFailedBatchRecords"
      actions   = ["s3:PutObject", "s3:ListBucket"]
      resources = [local.on_failure_destination_arn, "${local.on_failure_destination_arn}/*"]
    }
  }

  dynamic "statement" {
    for_each = contains(local.kafka_functions, each.key) && !local.kafka_failure_to_s3 ? [1] : []
    content {
      sid       = "SendFailedBatchRecords"
      actions   = ["sqs:SendMessage"]
      resources = [local.on_failure_destination_arn]
    }
  }

  # --- Glue catalog + S3 warehouse -------------------------------------------
  dynamic "statement" {
    for_each = local.glue ? [1] : []
    content {
      sid       = "GlueReadNamespace"
      actions   = ["glue:GetDatabase"]
      resources = [local.glue_catalog_arn, local.glue_database_arn]
    }
  }

  dynamic "statement" {
    for_each = local.glue ? [1] : []
    content {
      sid     = "GlueCommitOwnTables"
      actions = ["glue:GetTable", "glue:CreateTable", "glue:UpdateTable"]
      resources = concat([local.glue_catalog_arn, local.glue_database_arn],
      [for t in local.function_tables[each.key] : "${local.glue_table_arn}/${t}"])
    }
  }

  # Every commit archives a Glue table version (limit 100,000 per table); the
  # maintenance function deletes old versions after snapshot expiry.
  dynamic "statement" {
    for_each = local.glue && each.key == "maintenance" ? [1] : []
    content {
      sid     = "GlueDeleteOldTableVersions"
      actions = ["glue:GetTableVersions", "glue:DeleteTableVersion", "glue:BatchDeleteTableVersion"]
      resources = concat([local.glue_catalog_arn, local.glue_database_arn],
      [for t in local.function_tables[each.key] : "${local.glue_table_arn}/${t}"])
    }
  }

  dynamic "statement" {
    for_each = local.glue ? [1] : []
    content {
      sid = "WarehouseReadWriteOwnTables"
      actions = concat(["s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload"],
      contains(local.deleting_functions, each.key) ? ["s3:DeleteObject"] : [])
      resources = [for t in local.function_tables[each.key] : "${local.s3_warehouse_arn}/${t}/*"]
    }
  }

  dynamic "statement" {
    for_each = local.glue && each.key == "maintenance" ? [1] : []
    content {
      sid       = "WarehouseListOwnTablesForOrphans"
      actions   = ["s3:ListBucket"]
      resources = [aws_s3_bucket.this["warehouse"].arn]

      condition {
        test     = "StringLike"
        variable = "s3:prefix"
        values   = [for t in local.function_tables[each.key] : "${var.warehouse_prefix}/${var.namespace}.db/${t}/*"]
      }
    }
  }

  # --- S3 Tables (table ARNs carry table ids, not names: scoped to the bucket's tables)
  dynamic "statement" {
    for_each = local.glue ? [] : [1]
    content {
      sid = "S3TablesBucketAndNamespace"
      actions = concat(["s3tables:GetTableBucket", "s3tables:GetNamespace", "s3tables:ListTables", "s3tables:CreateTable"],
      each.key == "maintenance" ? ["s3tables:GetTableBucketMaintenanceConfiguration"] : [])
      resources = [aws_s3tables_table_bucket.this[0].arn]
    }
  }

  dynamic "statement" {
    for_each = local.glue ? [] : [1]
    content {
      sid = "S3TablesCommitTables"
      actions = concat(
        ["s3tables:CreateTable", "s3tables:GetTable", "s3tables:GetTableMetadataLocation",
        "s3tables:UpdateTableMetadataLocation", "s3tables:GetTableData", "s3tables:PutTableData"],
        each.key == "maintenance" ? ["s3tables:GetTableMaintenanceConfiguration",
        "s3tables:PutTableMaintenanceConfiguration", "s3tables:GetTableMaintenanceJobStatus"] : []
      )
      resources = ["${aws_s3tables_table_bucket.this[0].arn}/table/*"]
    }
  }

  # --- Queued commits ---------------------------------------------------------
  dynamic "statement" {
    for_each = local.queued && contains(local.kafka_functions, each.key) ? [1] : []
    content {
      sid       = "SendCommitRequests"
      actions   = ["sqs:SendMessage"]
      resources = [aws_sqs_queue.commit[0].arn]
    }
  }

  dynamic "statement" {
    for_each = each.key == "committer" ? [1] : []
    content {
      sid = "ConsumeCommitRequests"
      actions = ["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility",
      "sqs:GetQueueAttributes"]
      resources = [aws_sqs_queue.commit[0].arn]
    }
  }

  # --- X-Ray: trace segments cannot be scoped to a resource -------------------
  dynamic "statement" {
    for_each = var.enable_xray ? [1] : []
    content {
      sid       = "XRayTraces"
      actions   = ["xray:PutTraceSegments", "xray:PutTelemetryRecords"]
      resources = ["*"]
    }
  }
}

resource "aws_iam_role_policy" "function" {
  for_each = local.functions

  name   = "icestream-${each.key}"
  role   = aws_iam_role.function[each.key].id
  policy = data.aws_iam_policy_document.function[each.key].json
}
