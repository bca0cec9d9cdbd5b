################################################################################
# One execution role per function, least privilege: no wildcard actions;
# resources scoped to the function's log group, the cluster/topic/group ARNs
# (built from the cluster ARN), the catalog database and tables or the table
# bucket, the warehouse prefix of each table, the KMS key and the queues.
# Resource "*" only where the action cannot be scoped (ENI management for the
# Kafka pollers / VPC functions, MSK bootstrap brokers, Glue schema versions by
# id, X-Ray): tests/infra/test_iam_lint.py checks every action's resource types.
################################################################################

locals {
  # "none" outside Glue: statements of both catalogs are evaluated before one set is kept.
  s3_warehouse_arn    = "${local.warehouse_bucket}/${var.warehouse_prefix}/${var.namespace}.db"
  warehouse_bucket    = coalesce(local.warehouse_bucket_arn, "none")
  glue_catalog_arn    = "arn:${local.partition}:glue:${local.region}:${local.account}:catalog"
  glue_database_arn   = "arn:${local.partition}:glue:${local.region}:${local.account}:database/${var.namespace}"
  glue_table_arn      = "arn:${local.partition}:glue:${local.region}:${local.account}:table/${var.namespace}"
  vpc_functions       = var.function_vpc_config == null ? local.kafka_functions : keys(local.functions)
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

  name_prefix          = "${var.name}-${each.key}-"
  description          = "icestream ${each.key} function"
  assume_role_policy   = data.aws_iam_policy_document.lambda_assume.json
  permissions_boundary = local.permissions_boundary
  tags                 = local.tags
}

# The function policies are plain JSON built here (not aws_iam_policy_document) so that a plan
# shows them in full: tests/infra/test_contract.py checks each against the AWS calls the code
# declares (`icestream contract`).
locals {
  is_kafka  = { for f in keys(local.functions) : f => contains(local.kafka_functions, f) }
  is_writer = { for f in keys(local.functions) : f => contains(["ingest", "committer"], f) }
  # Decoders of the pipelines' records: ingest, and maintenance (dead-letter replay, recover).
  reads_registries = { for f in keys(local.functions) : f => contains(["ingest", "maintenance"], f) }
  table_prefixes = { for f in keys(local.functions) : f => [
    for t in local.function_tables[f] : "${var.warehouse_prefix}/${var.namespace}.db/${t}"
  ] }

  # Every statement carries `when`; the policy keeps those whose `when` holds. (One flat list
  # instead of conditional lists: Terraform wants both arms of a conditional to share a type.)
  commit_queue_arn = one(aws_sqs_queue.commit[*].arn)
  table_bucket     = coalesce(local.table_bucket_arn, "none")

  function_statements = { for f in keys(local.functions) : f => [for st in [
    { when = true, Sid = "WriteOwnLogs", Action = ["logs:CreateLogStream", "logs:PutLogEvents"], Resource = ["${aws_cloudwatch_log_group.function[f].arn}:*"] },
    { when = true, Sid = "UseDeploymentKey", Action = ["kms:Decrypt", "kms:GenerateDataKey"], Resource = [local.kms_key_arn] },
    # --- MSK (the Kafka mapping authenticates with the function's role) ----------------
    {
      when = local.is_kafka[f] && !local.self_managed, Sid = "MskCluster",
      Action = ["kafka:DescribeClusterV2", "kafka-cluster:Connect",
      "kafka-cluster:DescribeClusterDynamicConfiguration"],
      Resource = [local.msk_cluster_arn]
    },
    # GetBootstrapBrokers has no resource type: it is authorised on "*" only.
    { when = local.is_kafka[f] && !local.self_managed, Sid = "MskBootstrapBrokers", Action = ["kafka:GetBootstrapBrokers"], Resource = ["*"] },
    { when = local.is_kafka[f] && !local.self_managed, Sid = "MskReadOwnTopics", Action = ["kafka-cluster:DescribeTopic", "kafka-cluster:ReadData"], Resource = lookup(local.function_topic_arns, f, []) },
    { when = local.is_kafka[f] && !local.self_managed, Sid = "MskOwnConsumerGroups", Action = ["kafka-cluster:DescribeGroup", "kafka-cluster:AlterGroup"], Resource = lookup(local.function_group_arns, f, []) },
    # --- A self-managed cluster: the mapping reads its credentials (and CA) with the role.
    { when = local.is_kafka[f] && length(local.self_managed_secrets) > 0, Sid = "ReadKafkaCredentials", Action = ["secretsmanager:GetSecretValue"], Resource = local.self_managed_secrets },
    {
      when      = local.is_kafka[f] && try(var.self_managed_kafka.secret_kms_key_arn != null, false), Sid = "DecryptKafkaCredentials", Action = ["kms:Decrypt"],
      Resource  = [try(coalesce(var.self_managed_kafka.secret_kms_key_arn, "none"), "none")]
      Condition = { StringEquals = { "kms:ViaService" = ["secretsmanager.${local.region}.amazonaws.com"] } }
    },
    {
      when     = local.is_kafka[f] && local.kafka_failure_to_s3, Sid = "WriteFailedBatchRecords", Action = ["s3:PutObject", "s3:ListBucket"],
      Resource = [local.on_failure_destination_arn, "${local.on_failure_destination_arn}/*"]
    },
    { when = local.is_kafka[f] && !local.kafka_failure_to_s3, Sid = "SendFailedBatchRecords", Action = ["sqs:SendMessage"], Resource = [local.on_failure_destination_arn] },
    # ENIs of the Kafka pollers and VPC-attached functions (AWSLambdaVPCAccessExecutionRole's
    # set, IP assignment included): no resource-level scoping exists.
    {
      when = contains(local.vpc_functions, f), Sid = "ManagePollerNetworkInterfaces",
      Action = ["ec2:CreateNetworkInterface", "ec2:DeleteNetworkInterface", "ec2:DescribeNetworkInterfaces",
        "ec2:DescribeSecurityGroups", "ec2:DescribeSubnets", "ec2:DescribeVpcs",
      "ec2:AssignPrivateIpAddresses", "ec2:UnassignPrivateIpAddresses"],
      Resource = ["*"]
    },
    # --- Glue catalog + S3 warehouse, scoped to the function's tables ------------------
    {
      when     = local.glue, Sid = "GlueOwnTables",
      Action   = concat(["glue:GetDatabase", "glue:CreateDatabase", "glue:GetTable", "glue:CreateTable", "glue:UpdateTable"], f == "maintenance" ? ["glue:GetTables"] : []),
      Resource = concat([local.glue_catalog_arn, local.glue_database_arn], [for t in local.function_tables[f] : "${local.glue_table_arn}/${t}"])
    },
    # The start-up check (HeadBucket, catalog.rs) needs ListBucket without a prefix; the same
    # grant covers maintenance's orphan listing of its tables' prefixes.
    { when = local.glue, Sid = "WarehouseBucketExists", Action = ["s3:ListBucket"], Resource = [local.warehouse_bucket] },
    {
      when     = local.glue, Sid = "WarehouseReadWriteOwnTables",
      Action   = concat(["s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload"], f == "maintenance" ? ["s3:DeleteObject"] : []),
      Resource = [for t in local.function_tables[f] : "${local.s3_warehouse_arn}/${t}/*"]
    },
    # Writers remove the metadata files of a commit that lost its race at once (and the
    # committer the staged manifests it consumed); data files only maintenance deletes.
    {
      when = local.glue && local.is_writer[f], Sid = "WarehouseRemoveOwnUnreferencedMetadata", Action = ["s3:DeleteObject"],
      Resource = concat([for t in local.function_tables[f] : "${local.s3_warehouse_arn}/${t}/metadata/*"],
      f == "committer" ? [for t in local.function_tables[f] : "${local.s3_warehouse_arn}/${t}/staged/*"] : [])
    },
    # Glue's table optimizers (glue_optimizers.tf), set up by maintenance on its tables with
    # the optimizers' role, passed to Glue and to nothing else.
    {
      when     = f == "maintenance" && local.glue_optimizers, Sid = "GlueTableOptimizers",
      Action   = ["glue:GetTableOptimizer", "glue:CreateTableOptimizer", "glue:UpdateTableOptimizer"],
      Resource = concat([local.glue_catalog_arn, local.glue_database_arn], [for t in local.function_tables[f] : "${local.glue_table_arn}/${t}"])
    },
    {
      when      = f == "maintenance" && local.glue_optimizers, Sid = "PassGlueOptimizerRole", Action = ["iam:PassRole"],
      Resource  = [coalesce(local.optimizer_role, "none")]
      Condition = { StringEquals = { "iam:PassedToService" = ["glue.amazonaws.com"] } }
    },
    # --- S3 Tables: table ARNs carry ids, so tables are scoped by name (s3tables:tableName)
    {
      when     = !local.glue, Sid = "S3TablesBucketAndNamespace",
      Action   = concat(["s3tables:GetTableBucket", "s3tables:GetNamespace", "s3tables:CreateNamespace", "s3tables:ListTables"], f == "maintenance" ? ["s3tables:GetTableBucketMaintenanceConfiguration"] : []),
      Resource = [local.table_bucket]
    },
    # CreateTable is authorised on the bucket; of the new table's names it presents only the
    # namespace (s3tables:namespace) as a condition key.
    {
      when      = !local.glue, Sid = "S3TablesCreateTablesInNamespace", Action = ["s3tables:CreateTable"], Resource = [local.table_bucket]
      Condition = { StringEquals = { "s3tables:namespace" = [var.namespace] } }
    },
    {
      when = !local.glue, Sid = "S3TablesOwnTables",
      Action = concat(["s3tables:GetTable", "s3tables:GetTableMetadataLocation", "s3tables:UpdateTableMetadataLocation"],
      f == "maintenance" ? ["s3tables:GetTableMaintenanceConfiguration", "s3tables:PutTableMaintenanceConfiguration"] : []),
      Resource  = ["${local.table_bucket}/table/*"]
      Condition = { StringEquals = { "s3tables:namespace" = [var.namespace], "s3tables:tableName" = local.function_tables[f] } }
    },
    {
      when      = !local.glue, Sid = "S3TablesTableData", Action = ["s3tables:GetTableData", "s3tables:PutTableData"], Resource = ["${local.table_bucket}/table/*"]
      Condition = { StringEquals = { "s3tables:namespace" = [var.namespace], "s3tables:tableName" = local.function_tables[f] } }
    },
    # --- Queued commits -------------------------------------------------------------------
    { when = local.queued && local.is_kafka[f], Sid = "SendCommitRequests", Action = ["sqs:SendMessage"], Resource = [local.commit_queue_arn] },
    {
      when     = f == "committer", Sid = "ConsumeCommitRequests",
      Action   = ["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility", "sqs:GetQueueAttributes"],
      Resource = [local.commit_queue_arn]
    },
    # --- Schema registries the pipeline file names: ingest fetches writer schemas (Glue) or
    # a Confluent registry's credentials (Secrets Manager); maintenance too, for the dead-letter
    # replays and recoveries it decodes. A Glue lookup by SchemaVersionId (the id in each
    # record's frame) names no registry or schema, so IAM authorises it against "*".
    {
      when     = local.reads_registries[f] && length(local.glue_registry_names) > 0, Sid = "ReadGlueSchemaVersions", Action = ["glue:GetSchemaVersion"],
      Resource = ["*"]
    },
    {
      when = local.reads_registries[f] && length(local.registry_secrets) > 0, Sid = "ReadSchemaRegistryCredentials", Action = ["secretsmanager:GetSecretValue"],
      # A name matches its ARN's random six-character suffix; an ARN is used as it is.
      Resource = [for s in local.registry_secrets : startswith(s, "arn:") ? s : "arn:${local.partition}:secretsmanager:${local.region}:${local.account}:secret:${s}-??????"]
    },
    # A secret encrypted with a customer managed key: Secrets Manager decrypts it on the caller's behalf.
    {
      when      = local.reads_registries[f] && length(local.registry_secrets) > 0 && length(var.registry_secret_kms_key_arns) > 0, Sid = "DecryptSchemaRegistryCredentials", Action = ["kms:Decrypt"],
      Resource  = var.registry_secret_kms_key_arns
      Condition = { StringEquals = { "kms:ViaService" = ["secretsmanager.${local.region}.amazonaws.com"] } }
    },
    # --- Discarded Kafka batches (S3 on-failure destination): maintenance's `recover` reads them.
    {
      when     = f == "maintenance" && local.kafka_failure_to_s3, Sid = "ListDiscardedBatches", Action = ["s3:ListBucket"],
      Resource = [local.on_failure_destination_arn]
    },
    {
      when     = f == "maintenance" && local.kafka_failure_to_s3, Sid = "ReadDiscardedBatches", Action = ["s3:GetObject"],
      Resource = ["${local.on_failure_destination_arn}/*"]
    },
    # --- The pipeline file and its schemas (ingest, maintenance and the committer copy the file's directory
    # once per cold start: listed under that prefix, then read) -----------------------------
    { when = local.pipeline_file != null && contains(["ingest", "maintenance", "committer"], f), Sid = "ReadPipelineFile", Action = ["s3:GetObject"], Resource = ["${coalesce(local.pipeline_object_arn_prefix, "none")}/*"] },
    {
      when      = local.pipeline_file != null && contains(["ingest", "maintenance", "committer"], f), Sid = "ListPipelineDirectory", Action = ["s3:ListBucket"],
      Resource  = ["arn:${local.partition}:s3:::${coalesce(local.pipeline_bucket, "none")}"]
      Condition = { StringLike = { "s3:prefix" = ["${coalesce(local.pipeline_prefix, "none")}/", "${coalesce(local.pipeline_prefix, "none")}/*"] } }
    },
    { when = var.enable_xray, Sid = "XRayTraces", Action = ["xray:PutTraceSegments", "xray:PutTelemetryRecords"], Resource = ["*"] },
  ] : { for k, v in st : k => v if k != "when" } if st.when] }
}

resource "aws_iam_role_policy" "function" {
  for_each = local.functions

  name = "icestream-${each.key}"
  role = aws_iam_role.function[each.key].id
  policy = jsonencode({
    Version = "2012-10-17"
    # S3 only over TLS, whoever owns the bucket: a bring-your-own warehouse bucket has no bucket
    # policy of ours (storage.tf's DenyInsecureTransport covers only the buckets made here).
    Statement = [for s in local.function_statements[each.key] : merge({ Effect = "Allow" }, s, alltrue([for a in s.Action : startswith(a, "s3:")]) ? {
      Condition = merge(try(s.Condition, {}), { Bool = { "aws:SecureTransport" = "true" } })
    } : {})]
  })
}
